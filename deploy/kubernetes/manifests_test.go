package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifests is every object of the directory's YAML files, decoded.
type manifests struct {
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	services     map[string]*corev1.Service
	statefulSets map[string]*appsv1.StatefulSet
	pdbs         map[string]*policyv1.PodDisruptionBudget
}

// load decodes every document of every *.yaml file in dir strictly (an
// unknown or misspelt field is an error) into the API type its kind names;
// a kind the directory is not meant to hold is an error too.
func load(t *testing.T, dir string) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	m := &manifests{
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
		services:     map[string]*corev1.Service{},
		statefulSets: map[string]*appsv1.StatefulSet{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(raw) {
			if err := m.add(doc); err != nil {
				t.Errorf("%s, document %d: %v", filepath.Base(f), i+1, err)
			}
		}
	}
	return m
}

// splitDocs splits a YAML stream at its "---" lines and drops documents
// that hold nothing but comments.
func splitDocs(raw []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), raw...), []byte("\n---\n")) {
		empty := true
		for l := range strings.SplitSeq(string(d), "\n") {
			if s := strings.TrimSpace(l); s != "" && !strings.HasPrefix(s, "#") {
				empty = false
				break
			}
		}
		if !empty {
			docs = append(docs, d)
		}
	}
	return docs
}

// add decodes one document into its type.
func (m *manifests) add(doc []byte) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return fmt.Errorf("apiVersion and kind: %w", err)
	}
	strict := func(obj interface{ GetName() string }, into func(string)) error {
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return fmt.Errorf("%s: %w", head.Kind, err)
		}
		if obj.GetName() == "" {
			return fmt.Errorf("%s: no metadata.name", head.Kind)
		}
		into(obj.GetName())
		return nil
	}
	switch head.APIVersion + " " + head.Kind {
	case "v1 ConfigMap":
		o := new(corev1.ConfigMap)
		return strict(o, func(n string) { m.configMaps[n] = o })
	case "v1 Secret":
		o := new(corev1.Secret)
		return strict(o, func(n string) { m.secrets[n] = o })
	case "v1 Service":
		o := new(corev1.Service)
		return strict(o, func(n string) { m.services[n] = o })
	case "apps/v1 StatefulSet":
		o := new(appsv1.StatefulSet)
		return strict(o, func(n string) { m.statefulSets[n] = o })
	case "policy/v1 PodDisruptionBudget":
		o := new(policyv1.PodDisruptionBudget)
		return strict(o, func(n string) { m.pdbs[n] = o })
	}
	return fmt.Errorf("unexpected apiVersion %q kind %q", head.APIVersion, head.Kind)
}

// agentConfig is the part of the ConfigMap's ghba.yaml the manifests must
// agree with.
type agentConfig struct {
	Bootstrap           bool     `json:"bootstrap"`
	RetryJoin           []string `json:"retry_join"`
	Replication         int      `json:"replication"`
	StopHandoverTimeout string   `json:"stop_handover_timeout"`
	Ports               struct {
		RPC  int `json:"rpc"`
		Raft int `json:"raft"`
		Serf int `json:"serf"`
		HTTP int `json:"http"`
	} `json:"ports"`
}

// TestManifests decodes the manifests strictly and checks what holds them
// together: the StatefulSet's headless Service and the names in
// retry_join, the probes, the PodDisruptionBudget against the shards'
// majority, the grace period against the graceful stop, and the
// ConfigMap, Secrets and ports the pod names.
func TestManifests(t *testing.T) {
	m := load(t, ".")
	if t.Failed() {
		t.FailNow()
	}
	sts := m.statefulSets["ghba"]
	cm := m.configMaps["ghba-config"]
	if sts == nil || cm == nil {
		t.Fatalf("want StatefulSet ghba and ConfigMap ghba-config, have %d StatefulSets and %d ConfigMaps",
			len(m.statefulSets), len(m.configMaps))
	}
	var cfg agentConfig
	if err := yaml.Unmarshal([]byte(cm.Data["ghba.yaml"]), &cfg); err != nil {
		t.Fatalf("ConfigMap ghba-config, ghba.yaml: %v", err)
	}
	spec := sts.Spec
	pod := spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("StatefulSet: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	labels := spec.Template.Labels

	t.Run("headless service and retry_join", func(t *testing.T) {
		svc := m.services[spec.ServiceName]
		if svc == nil {
			t.Fatalf("serviceName %q: no such Service", spec.ServiceName)
		}
		if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want a headless Service that publishes pods before they are ready",
				svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
		}
		if !selects(svc.Spec.Selector, labels) {
			t.Errorf("Service %s selects %v, not the pods (%v)", svc.Name, svc.Spec.Selector, labels)
		}
		if spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement || !cfg.Bootstrap {
			t.Errorf("podManagementPolicy %q, bootstrap %v: every pod may found the cluster only if they start one at a time (OrderedReady)",
				spec.PodManagementPolicy, cfg.Bootstrap)
		}
		var want []string
		for i := range int(*spec.Replicas) {
			want = append(want, fmt.Sprintf("%s-%d.%s:%d", sts.Name, i, svc.Name, cfg.Ports.Serf))
		}
		if !slices.Equal(cfg.RetryJoin, want) {
			t.Errorf("retry_join %v, want the pods' stable names %v", cfg.RetryJoin, want)
		}
		for _, s := range m.services {
			for _, p := range s.Spec.Ports {
				if p.TargetPort.StrVal != "" && !hasPort(c, p.TargetPort.StrVal) {
					t.Errorf("Service %s port %s: targetPort %q is not a port of the container", s.Name, p.Name, p.TargetPort.StrVal)
				}
			}
		}
		ports := map[string]int{"rpc": cfg.Ports.RPC, "raft": cfg.Ports.Raft, "serf-tcp": cfg.Ports.Serf, "serf-udp": cfg.Ports.Serf, "http": cfg.Ports.HTTP}
		for _, p := range c.Ports {
			if want, ok := ports[p.Name]; !ok || int(p.ContainerPort) != want {
				t.Errorf("container port %s %d: the config says %d", p.Name, p.ContainerPort, want)
			}
		}
	})

	t.Run("probes", func(t *testing.T) {
		for _, p := range []struct {
			name  string
			probe *corev1.Probe
			path  string
		}{
			{"readinessProbe", c.ReadinessProbe, "/v1/health"},
			{"livenessProbe", c.LivenessProbe, "/v1/health/live"},
			{"startupProbe", c.StartupProbe, "/v1/health/live"},
		} {
			if p.probe == nil || p.probe.HTTPGet == nil {
				t.Errorf("%s: want an HTTP GET of %s", p.name, p.path)
				continue
			}
			if p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.StrVal != "http" {
				t.Errorf("%s: GET %s on port %v, want %s on the http port", p.name, p.probe.HTTPGet.Path, p.probe.HTTPGet.Port.String(), p.path)
			}
		}
	})

	t.Run("disruption budget keeps a majority of every shard", func(t *testing.T) {
		if len(m.pdbs) != 1 {
			t.Fatalf("%d PodDisruptionBudgets, want 1", len(m.pdbs))
		}
		for _, pdb := range m.pdbs {
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MinAvailable != nil {
				t.Fatalf("PodDisruptionBudget %s: want maxUnavailable alone", pdb.Name)
			}
			if !selects(pdb.Spec.Selector.MatchLabels, labels) {
				t.Errorf("PodDisruptionBudget %s selects %v, not the pods (%v)", pdb.Name, pdb.Spec.Selector.MatchLabels, labels)
			}
			// A shard has its replicas on distinct pods: with k down it
			// keeps replication-k of them, a majority while 2k < replication.
			k := pdb.Spec.MaxUnavailable.IntValue()
			if k < 1 || 2*k >= cfg.Replication {
				t.Errorf("maxUnavailable %d with replication %d: a shard could lose its majority", k, cfg.Replication)
			}
		}
	})

	t.Run("grace period covers the graceful stop", func(t *testing.T) {
		handover, err := time.ParseDuration(cfg.StopHandoverTimeout)
		if err != nil {
			t.Fatalf("stop_handover_timeout: %v", err)
		}
		shutdown := 30 * time.Second // ghba agent's default --shutdown-timeout
		if i := slices.Index(c.Args, "--shutdown-timeout"); i >= 0 && i+1 < len(c.Args) {
			if shutdown, err = time.ParseDuration(c.Args[i+1]); err != nil {
				t.Fatalf("--shutdown-timeout: %v", err)
			}
		}
		grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
		if handover >= shutdown || shutdown >= grace {
			t.Errorf("stop_handover_timeout %v, --shutdown-timeout %v, terminationGracePeriodSeconds %v: want each below the next",
				handover, shutdown, grace)
		}
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
			t.Errorf("a preStop hook: a restart must not leave the cluster; SIGTERM hands leaderships over")
		}
	})

	t.Run("config and secrets the pod names exist", func(t *testing.T) {
		for _, v := range pod.Volumes {
			switch {
			case v.ConfigMap != nil && m.configMaps[v.ConfigMap.Name] == nil:
				t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
			case v.Secret != nil && m.secrets[v.Secret.SecretName] == nil:
				t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			s := m.secrets[ref.Name]
			if s == nil {
				t.Errorf("env %s: no Secret %s", e.Name, ref.Name)
				continue
			}
			if _, ok := s.StringData[ref.Key]; !ok {
				t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
		}
		mounted := false
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == "/data" && slices.ContainsFunc(spec.VolumeClaimTemplates, func(p corev1.PersistentVolumeClaim) bool { return p.Name == vm.Name }) {
				mounted = true
			}
		}
		if !mounted || envValue(c, "GHBA_DATA_DIR") != "/data" {
			t.Errorf("the data directory /data must be the pod's volume claim (GHBA_DATA_DIR %q)", envValue(c, "GHBA_DATA_DIR"))
		}
	})

	t.Run("the agent accepts the configuration", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: builds the ghba binary")
		}
		checkWithAgent(t, cm.Data["ghba.yaml"], c)
	})
}

// checkWithAgent builds ghba and runs "ghba agent --check" on config with
// the container's arguments and environment (values from the downward API
// and the Secrets given as a pod would have them).
func checkWithAgent(t *testing.T, config string, c corev1.Container) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "ghba")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "hashicorpmetrics", "-o", bin, "./cmd/ghba")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "ghba.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{"metadata.name": "ghba-0", "status.podIP": "10.1.2.3"}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GHBA_") {
			env = append(env, e)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			v := e.Value
			if e.Name == "GHBA_DATA_DIR" {
				v = filepath.Join(dir, "data")
			}
			env = append(env, e.Name+"="+v)
		case e.ValueFrom.FieldRef != nil:
			env = append(env, e.Name+"="+fields[e.ValueFrom.FieldRef.FieldPath])
		}
	}
	args := slices.Clone(c.Args)
	if i := slices.Index(args, "--config"); i >= 0 && i+1 < len(args) {
		args[i+1] = file
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--check")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ghba %s --check: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, want := range []string{`"node_id": "ghba-0"`, `"advertise_addr": "10.1.2.3"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ghba agent --check: no %s in\n%s", want, out)
		}
	}
}

// selects reports whether every label of sel is in labels.
func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hasPort reports whether c has a port named name.
func hasPort(c corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == name })
}

// envValue returns the literal value of c's environment variable name.
func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}
