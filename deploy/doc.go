// Package deploy holds what runs ghba in containers: the image's Dockerfile
// (`make image`), compose.yaml with the configuration its nodes share
// (ghba.yaml), and the Kubernetes manifests (kubernetes/). It has no Go
// code of its own; its test starts the compose cluster from an image of
// this tree and answers a create and a stat through it (docs/deploy.md).
package deploy
