// Package kubernetes holds the manifests that run ghba on Kubernetes: a
// StatefulSet with a headless Service (stable names for retry_join), a
// client Service, a PodDisruptionBudget, a ConfigMap for the configuration
// and Secrets for the tokens and certificates (apply them with
// kubectl apply -f deploy/kubernetes/; docs/deploy.md has the scaling
// procedure). It has no Go code of its own: its test decodes every
// manifest strictly into the Kubernetes API types (k8s.io/api), checks that
// they agree with each other and with the agent's configuration, and has
// the agent validate the ConfigMap's configuration. Kubernetes itself was
// not run.
package kubernetes
