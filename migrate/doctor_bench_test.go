package migrate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/cidrshift/cidrshift/cidr"
	"github.com/cidrshift/cidrshift/nodecidr"
)

// The doctor's scale dump: a multi-kind List as `kubectl get
// nodes,pods,services,configmaps -A -o yaml` (or -o json) prints it, with
// kube-system's control-plane mirror Pods and the ConfigMaps the doctor
// reads. The cluster runs --cluster-cidr=10.64.0.0/10
// --node-cidr-mask-size=24 --service-cluster-ip-range=10.96.0.0/12, flannel
// vxlan over the same Network. Defects, as in BENCHMARKS.md §4 (e2e/perf):
// node i with i%250 == 1 shares its neighbour's /24, i%500 == 7 has none,
// every 1,000th pod has an IP outside its node's podCIDR; and, for the other
// layers, nodes with i%1000 == 3 announce host-gw, kube-proxy's clusterCIDR
// is 10.64.0.0/16, and every 2,000th Service has a ClusterIP outside the range.
const (
	benchClusterCIDR = "10.64.0.0/10"
	benchServiceCIDR = "10.96.0.0/12"
)

// benchDumpOptions sizes the dump.
type benchDumpOptions struct {
	Nodes, PodsPerNode, Services int
}

func benchNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

func benchUID(kind, i, j int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", kind, i&0xffff, j&0xfff, (i>>16)&0xfff, i*1000+j)
}

// benchSubnet is node i's podCIDR ("" for none).
func benchSubnet(i int) string {
	if i%500 == 7 {
		return ""
	}
	sub := i
	if i%250 == 1 {
		sub = i - 1
	}
	return fmt.Sprintf("10.%d.%d.0/24", 64+sub/256, sub%256)
}

// benchPodIP is pod j's IP on node i ("" when the node has no podCIDR).
func benchPodIP(i, j, perNode int) string {
	s := benchSubnet(i)
	if s == "" {
		return ""
	}
	if (i*perNode+j)%1000 == 0 {
		return "10.255.255.9"
	}
	return strings.TrimSuffix(s, "0/24") + strconv.Itoa(j+2)
}

// benchServiceIP is Service k's ClusterIP: 10.96.0.20 on, every 2,000th outside the range.
func benchServiceIP(k int) string {
	if k%2000 == 1999 {
		return fmt.Sprintf("10.200.0.%d", k/2000+1)
	}
	n := k + 20
	return fmt.Sprintf("10.%d.%d.%d", 96+n>>16, n>>8&0xff, n&0xff)
}

// tmpl is one kind's item with placeholders, compiled once into YAML or
// JSON and filled for every object: the per-object cost is a copy.
type tmpl struct {
	parts []string // parts[0] arg parts[1] arg ...
	args  []int
}

// benchArg is the placeholder of argument k: a plain YAML scalar that stays a string.
func benchArg(k int) string { return fmt.Sprintf("QZ%02dZQ", k) }

// compileTmpl turns write (a YAML List item, "- apiVersion: ...", given the
// placeholders) into a template of the item as kubectl prints it: YAML as
// written, or JSON as `kubectl get -o json` indents a List item.
func compileTmpl(nargs int, write func(w io.Writer, a []string), asJSON bool) (tmpl, error) {
	a := make([]string, nargs)
	for k := range a {
		a[k] = benchArg(k)
	}
	var buf bytes.Buffer
	write(&buf, a)
	text := buf.String()
	if asJSON {
		b := buf.Bytes()
		b[0] = ' ' // "- apiVersion" → "  apiVersion": the item as a document
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return tmpl{}, err
		}
		var ind bytes.Buffer
		if err := json.Indent(&ind, js, "        ", "    "); err != nil {
			return tmpl{}, err
		}
		text = "        " + ind.String()
	}
	var t tmpl
	for {
		i := strings.Index(text, "QZ")
		if i < 0 || len(text) < i+6 || text[i+4:i+6] != "ZQ" {
			break
		}
		k, err := strconv.Atoi(text[i+2 : i+4])
		if err != nil {
			return tmpl{}, err
		}
		t.parts = append(t.parts, text[:i])
		t.args = append(t.args, k)
		text = text[i+6:]
	}
	t.parts = append(t.parts, text)
	return t, nil
}

func (t tmpl) write(w *bufio.Writer, a []string) {
	for i, p := range t.parts {
		w.WriteString(p)
		if i < len(t.args) {
			w.WriteString(a[t.args[i]])
		}
	}
}

// Node: 0 name, 1 creationTimestamp, 2 zone, 3 pool, 4 resourceVersion,
// 5 uid, 6 hostIP, 7 backend-type, 8 VtepMAC, 9 podCIDR (template with one).
func benchNode(withPodCIDR bool) func(w io.Writer, a []string) {
	return func(w io.Writer, a []string) {
		fmt.Fprintf(w, `- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      flannel.alpha.coreos.com/backend-data: '{"VNI":1,"VtepMAC":"%[9]s"}'
      flannel.alpha.coreos.com/backend-type: %[8]s
      flannel.alpha.coreos.com/kube-subnet-manager: "true"
      flannel.alpha.coreos.com/public-ip: %[7]s
      kubeadm.alpha.kubernetes.io/cri-socket: unix:///run/containerd/containerd.sock
      node.alpha.kubernetes.io/ttl: "0"
      volumes.kubernetes.io/controller-managed-attach-detach: "true"
    creationTimestamp: "%[2]s"
    labels:
      beta.kubernetes.io/arch: amd64
      beta.kubernetes.io/instance-type: m6i.2xlarge
      beta.kubernetes.io/os: linux
      kubernetes.io/arch: amd64
      kubernetes.io/hostname: %[1]s
      kubernetes.io/os: linux
      node.kubernetes.io/instance-type: m6i.2xlarge
      pool: %[4]s
      topology.kubernetes.io/region: eu-west-1
      topology.kubernetes.io/zone: eu-west-1%[3]s
    name: %[1]s
    resourceVersion: "%[5]s"
    uid: %[6]s
  spec:
`, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8])
		if withPodCIDR {
			fmt.Fprintf(w, "    podCIDR: %[1]s\n    podCIDRs:\n    - %[1]s\n", a[9])
		}
		fmt.Fprintf(w, `    providerID: aws:///eu-west-1%[2]s/%[1]s
  status:
    addresses:
    - address: %[3]s
      type: InternalIP
    - address: %[1]s
      type: Hostname
    allocatable:
      cpu: "8"
      ephemeral-storage: "95551679124"
      memory: 31960212Ki
      pods: "110"
    capacity:
      cpu: "8"
      ephemeral-storage: 103680236Ki
      memory: 32062612Ki
      pods: "110"
    conditions:
    - lastHeartbeatTime: "2025-06-01T10:00:00Z"
      lastTransitionTime: "2025-03-01T10:01:00Z"
      message: kubelet has sufficient memory available
      reason: KubeletHasSufficientMemory
      status: "False"
      type: MemoryPressure
    - lastHeartbeatTime: "2025-06-01T10:00:00Z"
      lastTransitionTime: "2025-03-01T10:01:00Z"
      message: kubelet has no disk pressure
      reason: KubeletHasNoDiskPressure
      status: "False"
      type: DiskPressure
    - lastHeartbeatTime: "2025-06-01T10:00:00Z"
      lastTransitionTime: "2025-03-01T10:01:00Z"
      message: kubelet has sufficient PID available
      reason: KubeletHasSufficientPID
      status: "False"
      type: PIDPressure
    - lastHeartbeatTime: "2025-06-01T10:00:00Z"
      lastTransitionTime: "2025-03-01T10:02:00Z"
      message: kubelet is posting ready status
      reason: KubeletReady
      status: "True"
      type: Ready
    daemonEndpoints:
      kubeletEndpoint:
        Port: 10250
    images:
    - names:
      - registry.k8s.io/kube-proxy:v1.36.3
      sizeBytes: 31243952
    - names:
      - docker.io/flannel/flannel:v0.28.1
      sizeBytes: 33142518
    nodeInfo:
      architecture: amd64
      bootID: %[4]s
      containerRuntimeVersion: containerd://2.1.1
      kernelVersion: 6.8.0-1024-aws
      kubeProxyVersion: ""
      kubeletVersion: v1.36.3
      operatingSystem: linux
      osImage: Ubuntu 24.04.2 LTS
      systemUUID: %[4]s
`, a[0], a[2], a[6], a[5])
	}
}

// Pod: 0 name, 1 namespace, 2 uid, 3 nodeName, 4 app, 5 hostIP, 6 podIP
// (template with one), 7 resourceVersion, 8 volume suffix.
func benchPod(running bool) func(w io.Writer, a []string) {
	return func(w io.Writer, a []string) {
		fmt.Fprintf(w, `- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2025-05-01T10:00:00Z"
    generateName: %[5]s-5d8f7c9b4-
    labels:
      app.kubernetes.io/name: %[5]s
      app.kubernetes.io/part-of: shop
      pod-template-hash: 5d8f7c9b4
    name: %[1]s
    namespace: %[2]s
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: %[5]s-5d8f7c9b4
      uid: %[3]s
    resourceVersion: "%[8]s"
    uid: %[3]s
  spec:
    containers:
    - env:
      - name: LOG_LEVEL
        value: info
      - name: POD_NAME
        valueFrom:
          fieldRef:
            apiVersion: v1
            fieldPath: metadata.name
      image: registry.example.com/shop/%[5]s:1.4.0
      imagePullPolicy: IfNotPresent
      name: app
      ports:
      - containerPort: 8080
        name: http
        protocol: TCP
      readinessProbe:
        failureThreshold: 3
        httpGet:
          path: /healthz
          port: http
          scheme: HTTP
        periodSeconds: 10
        successThreshold: 1
        timeoutSeconds: 1
      resources:
        limits:
          memory: 256Mi
        requests:
          cpu: 100m
          memory: 128Mi
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: File
      volumeMounts:
      - mountPath: /var/run/secrets/kubernetes.io/serviceaccount
        name: kube-api-access-%[9]s
        readOnly: true
    dnsPolicy: ClusterFirst
    enableServiceLinks: true
    nodeName: %[4]s
    preemptionPolicy: PreemptLowerPriority
    priority: 0
    restartPolicy: Always
    schedulerName: default-scheduler
    securityContext: {}
    serviceAccount: default
    serviceAccountName: default
    terminationGracePeriodSeconds: 30
    tolerations:
    - effect: NoExecute
      key: node.kubernetes.io/not-ready
      operator: Exists
      tolerationSeconds: 300
    - effect: NoExecute
      key: node.kubernetes.io/unreachable
      operator: Exists
      tolerationSeconds: 300
    volumes:
    - name: kube-api-access-%[9]s
      projected:
        defaultMode: 420
        sources:
        - serviceAccountToken:
            expirationSeconds: 3607
            path: token
        - configMap:
            items:
            - key: ca.crt
              path: ca.crt
            name: kube-root-ca.crt
        - downwardAPI:
            items:
            - fieldRef:
                apiVersion: v1
                fieldPath: metadata.namespace
              path: namespace
  status:
    conditions:
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:09Z"
      status: "%[10]s"
      type: Ready
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:00Z"
      status: "True"
      type: PodScheduled
    hostIP: %[6]s
    hostIPs:
    - ip: %[6]s
`, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], map[bool]string{true: "True", false: "False"}[running])
		if !running {
			fmt.Fprint(w, "    phase: Pending\n    qosClass: Burstable\n")
			return
		}
		fmt.Fprintf(w, `    containerStatuses:
    - image: registry.example.com/shop/%[1]s:1.4.0
      lastState: {}
      name: app
      ready: true
      restartCount: 0
      started: true
      state:
        running:
          startedAt: "2025-05-01T10:00:03Z"
    phase: Running
    podIP: %[2]s
    podIPs:
    - ip: %[2]s
    qosClass: Burstable
    startTime: "2025-05-01T10:00:00Z"
`, a[4], a[6])
	}
}

// Service: 0 name, 1 namespace, 2 uid, 3 clusterIP, 4 resourceVersion.
func benchService(w io.Writer, a []string) {
	fmt.Fprintf(w, `- apiVersion: v1
  kind: Service
  metadata:
    annotations:
      meta.helm.sh/release-name: shop
      meta.helm.sh/release-namespace: %[2]s
    creationTimestamp: "2025-05-01T10:00:00Z"
    labels:
      app.kubernetes.io/managed-by: Helm
      app.kubernetes.io/name: %[1]s
      app.kubernetes.io/part-of: shop
    name: %[1]s
    namespace: %[2]s
    resourceVersion: "%[5]s"
    uid: %[3]s
  spec:
    clusterIP: %[4]s
    clusterIPs:
    - %[4]s
    internalTrafficPolicy: Cluster
    ipFamilies:
    - IPv4
    ipFamilyPolicy: SingleStack
    ports:
    - name: http
      port: 80
      protocol: TCP
      targetPort: http
    - name: metrics
      port: 9090
      protocol: TCP
      targetPort: 9090
    selector:
      app.kubernetes.io/name: %[1]s
    sessionAffinity: None
    type: ClusterIP
  status:
    loadBalancer: {}
`, a[0], a[1], a[2], a[3], a[4])
}

// benchFixed are the objects written once: the control-plane mirror Pods,
// default/kubernetes and kube-system/kube-dns, and the ConfigMaps.
func benchFixed(kind string) string {
	switch kind {
	case "Pod":
		return fmt.Sprintf(`- apiVersion: v1
  kind: Pod
  metadata:
    labels:
      component: kube-controller-manager
      tier: control-plane
    name: kube-controller-manager-node-00000
    namespace: kube-system
    uid: %[1]s
  spec:
    containers:
    - command:
      - kube-controller-manager
      - --allocate-node-cidrs=true
      - --cluster-cidr=%[3]s
      - --node-cidr-mask-size=24
      - --service-cluster-ip-range=%[4]s
      - --kubeconfig=/etc/kubernetes/controller-manager.conf
      image: registry.k8s.io/kube-controller-manager:v1.36.3
      name: kube-controller-manager
    hostNetwork: true
    nodeName: node-00000
  status:
    phase: Running
    podIP: 192.168.10.2
- apiVersion: v1
  kind: Pod
  metadata:
    labels:
      component: kube-apiserver
      tier: control-plane
    name: kube-apiserver-node-00000
    namespace: kube-system
    uid: %[2]s
  spec:
    containers:
    - command:
      - kube-apiserver
      - --advertise-address=192.168.10.2
      - --service-cluster-ip-range=%[4]s
      image: registry.k8s.io/kube-apiserver:v1.36.3
      name: kube-apiserver
    hostNetwork: true
    nodeName: node-00000
  status:
    phase: Running
    podIP: 192.168.10.2
`, benchUID(4, 0, 0), benchUID(4, 1, 0), benchClusterCIDR, benchServiceCIDR)
	case "Service":
		return `- apiVersion: v1
  kind: Service
  metadata:
    labels:
      component: apiserver
      provider: kubernetes
    name: kubernetes
    namespace: default
  spec:
    clusterIP: 10.96.0.1
    clusterIPs:
    - 10.96.0.1
    ports:
    - name: https
      port: 443
      protocol: TCP
      targetPort: 6443
    type: ClusterIP
- apiVersion: v1
  kind: Service
  metadata:
    labels:
      k8s-app: kube-dns
      kubernetes.io/name: CoreDNS
    name: kube-dns
    namespace: kube-system
  spec:
    clusterIP: 10.96.0.10
    clusterIPs:
    - 10.96.0.10
    ports:
    - name: dns
      port: 53
      protocol: UDP
      targetPort: 53
    selector:
      k8s-app: kube-dns
    type: ClusterIP
`
	case "ConfigMap":
		return `- apiVersion: v1
  data:
    cni-conf.json: |
      {
        "name": "cbr0",
        "cniVersion": "0.3.1",
        "plugins": [{"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}}, {"type": "portmap", "capabilities": {"portMappings": true}}]
      }
    net-conf.json: |
      {
        "Network": "10.64.0.0/10",
        "EnableNFTables": false,
        "Backend": {
          "Type": "vxlan"
        }
      }
  kind: ConfigMap
  metadata:
    labels:
      app: flannel
      tier: node
    name: kube-flannel-cfg
    namespace: kube-flannel
- apiVersion: v1
  data:
    config.conf: |-
      apiVersion: kubeproxy.config.k8s.io/v1alpha1
      bindAddress: 0.0.0.0
      clusterCIDR: 10.64.0.0/16
      kind: KubeProxyConfiguration
      mode: iptables
    kubeconfig.conf: |-
      apiVersion: v1
      kind: Config
      clusters:
      - cluster:
          server: https://192.168.10.2:6443
        name: default
  kind: ConfigMap
  metadata:
    labels:
      app: kube-proxy
    name: kube-proxy
    namespace: kube-system
- apiVersion: v1
  data:
    kubelet: |
      apiVersion: kubelet.config.k8s.io/v1beta1
      kind: KubeletConfiguration
      cgroupDriver: systemd
      clusterDNS:
      - 10.96.0.10
      clusterDomain: cluster.local
  kind: ConfigMap
  metadata:
    name: kubelet-config
    namespace: kube-system
- apiVersion: v1
  data:
    ClusterConfiguration: |
      apiVersion: kubeadm.k8s.io/v1beta4
      kind: ClusterConfiguration
      kubernetesVersion: v1.36.3
      networking:
        dnsDomain: cluster.local
        podSubnet: 10.64.0.0/10
        serviceSubnet: 10.96.0.0/12
      controllerManager:
        extraArgs:
        - name: node-cidr-mask-size
          value: "24"
  kind: ConfigMap
  metadata:
    name: kubeadm-config
    namespace: kube-system
`
	}
	panic(kind)
}

// writeBenchDump writes the multi-kind dump, YAML or JSON, and returns its size.
func writeBenchDump(w io.Writer, o benchDumpOptions, asJSON bool) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	compile := func(n int, f func(io.Writer, []string)) tmpl {
		t, err := compileTmpl(n, f, asJSON)
		if err != nil {
			panic(err) // the templates are constants
		}
		return t
	}
	nodeT, bareNodeT := compile(10, benchNode(true)), compile(10, benchNode(false))
	podT, pendingT := compile(10, benchPod(true)), compile(10, benchPod(false))
	svcT := compile(5, benchService)
	first := true
	sep := func() {
		if asJSON && !first {
			bw.WriteString(",\n")
		}
		first = false
	}
	// fixed writes objects that are the same in every dump.
	fixed := func(kind string) error {
		y := benchFixed(kind)
		if !asJSON {
			bw.WriteString(y)
			return nil
		}
		var items []any
		if err := yaml.Unmarshal([]byte(y), &items); err != nil {
			return err
		}
		for _, it := range items {
			js, err := json.MarshalIndent(it, "        ", "    ")
			if err != nil {
				return err
			}
			sep()
			bw.WriteString("        ")
			bw.Write(js)
		}
		return nil
	}
	if asJSON {
		bw.WriteString("{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n")
	} else {
		bw.WriteString("apiVersion: v1\nitems:\n")
	}
	a := make([]string, 10)
	for i := range o.Nodes {
		backend := "vxlan"
		if i%1000 == 3 {
			backend = "host-gw"
		}
		hostIP := fmt.Sprintf("192.168.%d.%d", 10+i/250, i%250+2)
		a[0], a[1], a[2], a[3], a[4] = benchNodeName(i), fmt.Sprintf("2025-03-01T10:%02d:%02dZ", i/60%60, i%60), "abc"[i%3:i%3+1], "pool-"+strconv.Itoa(i%7), strconv.Itoa(100000+i)
		a[5], a[6], a[7], a[8], a[9] = benchUID(1, i, 0), hostIP, backend, fmt.Sprintf("02:42:%02x:%02x:00:01", i>>8&0xff, i&0xff), benchSubnet(i)
		sep()
		if a[9] == "" {
			bareNodeT.write(bw, a)
		} else {
			nodeT.write(bw, a)
		}
	}
	if err := fixed("Pod"); err != nil {
		return 0, err
	}
	for i := range o.Nodes {
		for j := range o.PodsPerNode {
			app := "app-" + strconv.Itoa((i*o.PodsPerNode+j)%400)
			suffix := fmt.Sprintf("%05x", (i*o.PodsPerNode+j)*2654435761%0xfffff)
			a[0], a[1], a[2], a[3], a[4] = app+"-5d8f7c9b4-"+suffix, "ns-"+strconv.Itoa(j%20), benchUID(5, i, j), benchNodeName(i), app
			a[5], a[6], a[7], a[8] = fmt.Sprintf("192.168.%d.%d", 10+i/250, i%250+2), benchPodIP(i, j, o.PodsPerNode), strconv.Itoa(200000+i*o.PodsPerNode+j), suffix
			sep()
			if a[6] == "" {
				pendingT.write(bw, a)
			} else {
				podT.write(bw, a)
			}
		}
	}
	if err := fixed("Service"); err != nil {
		return 0, err
	}
	for k := range o.Services {
		a[0], a[1], a[2], a[3], a[4] = fmt.Sprintf("svc-%05d", k), "ns-"+strconv.Itoa(k%20), benchUID(7, k, 0), benchServiceIP(k), strconv.Itoa(400000+k)
		sep()
		svcT.write(bw, a)
	}
	if err := fixed("ConfigMap"); err != nil {
		return 0, err
	}
	if asJSON {
		bw.WriteString("\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
	} else {
		bw.WriteString("kind: List\nmetadata:\n  resourceVersion: \"\"\n")
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, cw.err
}

type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

// benchWant is what the doctor must find in a dump of o, per code.
func benchWant(o benchDumpOptions) map[Code]int {
	want := map[Code]int{}
	for i := range o.Nodes {
		switch {
		case i%500 == 7:
			want[Code(nodecidr.FindingMissing)]++
		case i%250 == 1:
			want[Code(nodecidr.FindingDuplicate)]++
		}
		if i%1000 == 3 {
			want[CodeFlannelBackendMismatch]++
		}
	}
	for k := range o.Services {
		if k%2000 == 1999 {
			want[CodeServiceIPOutsideRange]++
		}
	}
	want[CodeKubeProxyClusterCIDRMismatch] = 1
	return want
}

// checkBenchReport fails unless rep holds exactly the planted findings of
// the codes benchWant counts, and a fix plan moving every broken node.
func checkBenchReport(t testing.TB, o benchDumpOptions, rep *DoctorReport) {
	t.Helper()
	want := benchWant(o)
	for c, n := range want {
		require.Len(t, rep.With(c), n, "code %s", c)
	}
	outside := 0
	for _, f := range rep.Audit.Findings {
		if f.Kind == nodecidr.FindingPodIPOutside {
			outside++
		}
	}
	require.Positive(t, outside, "pod-ip-outside-podcidr")
	require.NotNil(t, rep.FixPlan, "fix plan: %s", rep.FixPlanError)
	require.Len(t, rep.FixPlan.Steps, want[Code(nodecidr.FindingMissing)]+want[Code(nodecidr.FindingDuplicate)])
	require.Len(t, rep.Repairs, want[CodeFlannelBackendMismatch])
	require.False(t, rep.Healthy)
}

// benchNodeOnly is what the doctor did before it read every layer
// (fc662eb): nodecidr.ReadDump, the flags, the node audit, the preflight
// and the fix plan.
func benchNodeOnly(ctx context.Context, r io.Reader) (*nodecidr.Report, *nodecidr.Plan, error) {
	d, err := nodecidr.ReadDump(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	flags := cidr.ControllerManagerFlags{AllocateNodeCIDRs: true, ClusterCIDR: benchClusterCIDR, NodeCIDRMaskSize: 24, ServiceClusterIPRange: benchServiceCIDR}
	check := cidr.CheckLayout(flags)
	rep := nodecidr.AuditNodes(d.Nodes, d.Pods, nodecidr.AuditOptions{Layout: check.Layout, Pods: true})
	_ = nodecidr.Preflight(flags, d.Nodes)
	plan, err := nodecidr.PlanNodes(d.Nodes, nodecidr.PlanOptions{Mode: nodecidr.ModeFix, Layout: check.Layout})
	return rep, plan, err
}

// benchDiagnose is today's doctor: ReadSnapshot and Diagnose.
func benchDiagnose(ctx context.Context, name string, r io.Reader) (*DoctorReport, error) {
	s, err := ReadSnapshot(ctx, Input{Name: name, R: r})
	if err != nil {
		return nil, err
	}
	return Diagnose(ctx, s, DoctorOptions{Pods: true})
}

// TestBenchDumpDiagnosed checks the benchmark's generator on a small dump:
// the YAML and JSON dumps read the same, and the doctor finds exactly the
// planted defects.
func TestBenchDumpDiagnosed(t *testing.T) {
	o := benchDumpOptions{Nodes: 1100, PodsPerNode: 3, Services: 4000}
	var snaps []*Snapshot
	for _, asJSON := range []bool{false, true} {
		var buf bytes.Buffer
		size, err := writeBenchDump(&buf, o, asJSON)
		require.NoError(t, err)
		s, err := ReadSnapshot(t.Context(), Input{Name: "dump", R: &buf})
		require.NoError(t, err)
		require.Len(t, s.Nodes, o.Nodes)
		require.Len(t, s.Pods, o.Nodes*o.PodsPerNode+2)
		require.Len(t, s.Services, o.Services+2)
		require.Len(t, s.ConfigMaps, 4)
		require.Len(t, s.ControlPlanePods, 2)
		rep, err := Diagnose(t.Context(), s, DoctorOptions{Pods: true})
		require.NoError(t, err)
		checkBenchReport(t, o, rep)
		codes := map[Code]int{}
		for _, f := range rep.Findings {
			codes[f.Code]++
		}
		t.Logf("JSON %t: %d bytes, findings %v", asJSON, size, codes)
		snaps = append(snaps, s)
	}
	require.Equal(t, snaps[0].Services, snaps[1].Services)
	require.Equal(t, snaps[0].ConfigMaps, snaps[1].ConfigMaps)
	require.Equal(t, snaps[0].ControlPlanePods, snaps[1].ControlPlanePods)
	require.Equal(t, snaps[0].Nodes, snaps[1].Nodes)
	require.Equal(t, snaps[0].Pods, snaps[1].Pods)
}

// BenchmarkDoctorDump compares, on one multi-kind dump of 5,000 nodes,
// 150,000 pods and 20,000 Services (YAML and JSON, written once to
// CIDRSHIFT_DOCTOR_DUMP_DIR, kept there, or to a temp dir), the node-only
// read and audit of the doctor before issue 16 and ReadSnapshot + Diagnose.
//
//	go test -run '^$' -bench DoctorDump -benchtime 3x -benchmem ./migrate
func BenchmarkDoctorDump(b *testing.B) {
	o := benchDumpOptions{Nodes: 5000, PodsPerNode: 30, Services: 20000}
	dir := os.Getenv("CIDRSHIFT_DOCTOR_DUMP_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, format := range []string{"yaml", "json"} {
		path := filepath.Join(dir, "doctor-dump."+format)
		f, err := os.Create(path)
		require.NoError(b, err)
		size, err := writeBenchDump(f, o, format == "json")
		require.NoError(b, err)
		require.NoError(b, f.Close())
		b.Logf("%s: %d MiB", path, size>>20)
		open := func(b *testing.B) *os.File {
			f, err := os.Open(path)
			require.NoError(b, err)
			return f
		}
		b.Run(format+"/node-only", func(b *testing.B) {
			for b.Loop() {
				f := open(b)
				rep, plan, err := benchNodeOnly(b.Context(), f)
				f.Close()
				require.NoError(b, err)
				require.Len(b, plan.Steps, 30)
				require.Equal(b, 5000, rep.Nodes)
			}
		})
		b.Run(format+"/snapshot+diagnose", func(b *testing.B) {
			for b.Loop() {
				f := open(b)
				rep, err := benchDiagnose(b.Context(), path, f)
				f.Close()
				require.NoError(b, err)
				checkBenchReport(b, o, rep)
			}
		})
	}
}
