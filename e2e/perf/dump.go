package perf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// DumpOptions shapes a generated `kubectl get nodes,pods -A -o yaml` dump.
type DumpOptions struct {
	// Nodes and PodsPerNode size the cluster (5,000 and 30 make 150,000 pods).
	Nodes, PodsPerNode int
	// Minimal writes pods with only the fields the audit reads (name,
	// namespace, nodeName, one container, phase, podIP(s)): about 0.4 KB a
	// pod. Otherwise pods look like what kubectl prints for a running
	// Deployment pod (owner reference, projected token volume, default
	// tolerations, five conditions, a container status): about 3 KB.
	Minimal bool
}

// Dump layout: the cluster runs kube-controller-manager with
// --cluster-cidr=10.64.0.0/10 --node-cidr-mask-size=24
// --service-cluster-ip-range=10.96.0.0/12, and its static pod is in the dump,
// so doctor reads the flags from it. Node i has podCIDR 10.(64+i/256).(i%256).0/24,
// except that every 250th node (i%250 == 1) shares its neighbour's subnet
// and every 500th (i%500 == 7) has none; every 1000th pod has an IP outside
// its node's podCIDR. These are the same defects as nodecidr's benchmarks.
const (
	DumpClusterCIDR = "10.64.0.0/10"
	DumpServiceCIDR = "10.96.0.0/12"
)

// DumpNodeName is the name of node i.
func DumpNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// DumpSubnet returns the third and second octets of node i's podCIDR
// 10.A.B.0/24 and whether it has one.
func DumpSubnet(i int) (a, b int, ok bool) {
	if i%500 == 7 {
		return 0, 0, false
	}
	sub := i
	if i%250 == 1 {
		sub = i - 1
	}
	return 64 + sub/256, sub % 256, true
}

// DumpPodIP is the IP of pod j on node i ("" when the node has no podCIDR).
func DumpPodIP(i, j, podsPerNode int) string {
	a, b, ok := DumpSubnet(i)
	if !ok {
		return ""
	}
	if (i*podsPerNode+j)%1000 == 0 {
		return "10.255.255.9"
	}
	return fmt.Sprintf("10.%d.%d.%d", a, b, j+2)
}

// WriteDump writes a v1 List of Nodes and Pods as `kubectl get nodes,pods
// -A -o yaml` prints it, and returns the number of bytes written.
func WriteDump(w io.Writer, o DumpOptions) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	fmt.Fprint(bw, "apiVersion: v1\nitems:\n")
	for i := range o.Nodes {
		writeNode(bw, i)
	}
	writeControllerManagerPod(bw)
	for i := range o.Nodes {
		for j := range o.PodsPerNode {
			if o.Minimal {
				writeMinimalPod(bw, i, j, o.PodsPerNode)
			} else {
				writePod(bw, i, j, o.PodsPerNode)
			}
		}
	}
	fmt.Fprint(bw, "kind: List\nmetadata:\n  resourceVersion: \"\"\n")
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, cw.err
}

// WriteDumpJSON writes the same dump as WriteDump the way `kubectl get
// nodes,pods -A -o json` prints it (a v1 List, four-space indentation), and
// returns the number of bytes written. Each item is written as YAML and
// converted with sigs.k8s.io/yaml, so both dumps hold the same objects.
func WriteDumpJSON(w io.Writer, o DumpOptions) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	fmt.Fprint(bw, "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n")
	var y, ind bytes.Buffer
	first := true
	item := func(write func(io.Writer)) error {
		y.Reset()
		write(&y)
		b := y.Bytes()
		b[0] = ' ' // "- apiVersion" → "  apiVersion": the item as a document
		js, err := yaml.YAMLToJSON(b)
		if err != nil {
			return err
		}
		ind.Reset()
		if err := json.Indent(&ind, js, "        ", "    "); err != nil {
			return err
		}
		if !first {
			bw.WriteString(",\n")
		}
		first = false
		bw.WriteString("        ")
		_, err = bw.Write(ind.Bytes())
		return err
	}
	for i := range o.Nodes {
		if err := item(func(w io.Writer) { writeNode(w, i) }); err != nil {
			return cw.n, err
		}
	}
	if err := item(writeControllerManagerPod); err != nil {
		return cw.n, err
	}
	for i := range o.Nodes {
		for j := range o.PodsPerNode {
			var err error
			if o.Minimal {
				err = item(func(w io.Writer) { writeMinimalPod(w, i, j, o.PodsPerNode) })
			} else {
				err = item(func(w io.Writer) { writePod(w, i, j, o.PodsPerNode) })
			}
			if err != nil {
				return cw.n, err
			}
		}
	}
	fmt.Fprint(bw, "\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n")
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	return cw.n, cw.err
}

type countWriter struct {
	w   io.Writer
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}

func uid(kind, i, j int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", kind, i&0xffff, j&0xfff, (i>>16)&0xfff, i*1000+j)
}

func writeNode(w io.Writer, i int) {
	name := DumpNodeName(i)
	zone := "abc"[i%3 : i%3+1]
	hostIP := fmt.Sprintf("192.168.%d.%d", 10+i/250, i%250+2)
	fmt.Fprintf(w, `- apiVersion: v1
  kind: Node
  metadata:
    annotations:
      kubeadm.alpha.kubernetes.io/cri-socket: unix:///run/containerd/containerd.sock
      node.alpha.kubernetes.io/ttl: "0"
      volumes.kubernetes.io/controller-managed-attach-detach: "true"
    creationTimestamp: "2025-03-01T10:%02d:%02dZ"
    labels:
      beta.kubernetes.io/arch: amd64
      beta.kubernetes.io/instance-type: m6i.2xlarge
      beta.kubernetes.io/os: linux
      kubernetes.io/arch: amd64
      kubernetes.io/hostname: %s
      kubernetes.io/os: linux
      node.kubernetes.io/instance-type: m6i.2xlarge
      pool: pool-%d
      topology.kubernetes.io/region: eu-west-1
      topology.kubernetes.io/zone: eu-west-1%s
    name: %s
    resourceVersion: "%d"
    uid: %s
  spec:
`, i/60%60, i%60, name, i%7, zone, name, 100000+i, uid(1, i, 0))
	if a, b, ok := DumpSubnet(i); ok {
		fmt.Fprintf(w, "    podCIDR: 10.%d.%d.0/24\n    podCIDRs:\n    - 10.%d.%d.0/24\n", a, b, a, b)
	}
	fmt.Fprintf(w, `    providerID: aws:///eu-west-1%s/i-%017x
  status:
    addresses:
    - address: %s
      type: InternalIP
    - address: %s
      type: Hostname
    allocatable:
      cpu: "8"
      ephemeral-storage: "95551679124"
      hugepages-1Gi: "0"
      hugepages-2Mi: "0"
      memory: 31960212Ki
      pods: "110"
    capacity:
      cpu: "8"
      ephemeral-storage: 103680236Ki
      hugepages-1Gi: "0"
      hugepages-2Mi: "0"
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
      - registry.k8s.io/kube-proxy@sha256:%064x
      - registry.k8s.io/kube-proxy:v1.36.3
      sizeBytes: 31243952
    - names:
      - docker.io/flannel/flannel@sha256:%064x
      - docker.io/flannel/flannel:v0.28.1
      sizeBytes: 33142518
    - names:
      - registry.k8s.io/pause@sha256:%064x
      - registry.k8s.io/pause:3.10
      sizeBytes: 320368
    nodeInfo:
      architecture: amd64
      bootID: %s
      containerRuntimeVersion: containerd://2.1.1
      kernelVersion: 6.8.0-1024-aws
      kubeProxyVersion: ""
      kubeletVersion: v1.36.3
      machineID: "%032x"
      operatingSystem: linux
      osImage: Ubuntu 24.04.2 LTS
      systemUUID: %s
`, zone, i, hostIP, name, 1, 2, 3, uid(2, i, 0), i, uid(3, i, 0))
}

func writeControllerManagerPod(w io.Writer) {
	fmt.Fprintf(w, `- apiVersion: v1
  kind: Pod
  metadata:
    annotations:
      kubernetes.io/config.hash: 0d3a5c8b7e1f2a4b6c8d0e1f2a3b4c5d
      kubernetes.io/config.mirror: 0d3a5c8b7e1f2a4b6c8d0e1f2a3b4c5d
      kubernetes.io/config.source: file
    labels:
      component: kube-controller-manager
      tier: control-plane
    name: kube-controller-manager-%s
    namespace: kube-system
    uid: %s
  spec:
    containers:
    - command:
      - kube-controller-manager
      - --allocate-node-cidrs=true
      - --cluster-cidr=%s
      - --node-cidr-mask-size=24
      - --service-cluster-ip-range=%s
      - --kubeconfig=/etc/kubernetes/controller-manager.conf
      - --leader-elect=true
      image: registry.k8s.io/kube-controller-manager:v1.36.3
      name: kube-controller-manager
    hostNetwork: true
    nodeName: %s
  status:
    phase: Running
    podIP: 192.168.10.2
    podIPs:
    - ip: 192.168.10.2
`, DumpNodeName(0), uid(4, 0, 0), DumpClusterCIDR, DumpServiceCIDR, DumpNodeName(0))
}

func writeMinimalPod(w io.Writer, i, j, perNode int) {
	ip := DumpPodIP(i, j, perNode)
	fmt.Fprintf(w, `- apiVersion: v1
  kind: Pod
  metadata:
    name: pod-%05d-%02d
    namespace: ns-%d
    uid: %s
  spec:
    containers:
    - image: registry.k8s.io/pause:3.10
      name: app
    nodeName: %s
  status:
`, i, j, j%20, uid(5, i, j), DumpNodeName(i))
	if ip == "" {
		fmt.Fprint(w, "    phase: Pending\n")
		return
	}
	fmt.Fprintf(w, "    phase: Running\n    podIP: %s\n    podIPs:\n    - ip: %s\n", ip, ip)
}

func writePod(w io.Writer, i, j, perNode int) {
	ip := DumpPodIP(i, j, perNode)
	app := (i*perNode + j) % 400
	hash := fmt.Sprintf("%010x", app*7919)[:10]
	rs := fmt.Sprintf("app-%03d-%s", app, hash)
	hostIP := fmt.Sprintf("192.168.%d.%d", 10+i/250, i%250+2)
	suffix := fmt.Sprintf("%05x", (i*perNode+j)*2654435761%0xfffff)
	fmt.Fprintf(w, `- apiVersion: v1
  kind: Pod
  metadata:
    creationTimestamp: "2025-05-01T10:%02d:%02dZ"
    generateName: %s-
    labels:
      app.kubernetes.io/name: app-%03d
      app.kubernetes.io/part-of: shop
      pod-template-hash: "%s"
    name: %s-%s
    namespace: ns-%d
    ownerReferences:
    - apiVersion: apps/v1
      blockOwnerDeletion: true
      controller: true
      kind: ReplicaSet
      name: %s
      uid: %s
    resourceVersion: "%d"
    uid: %s
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
      image: registry.example.com/shop/app-%03d:1.%d.0
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
        name: kube-api-access-%s
        readOnly: true
    dnsPolicy: ClusterFirst
    enableServiceLinks: true
    nodeName: %s
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
    - name: kube-api-access-%s
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
`, (i+j)/60%60, (i+j)%60, rs, app, hash, rs, suffix, j%20, rs, uid(6, app, 0), 200000+i*perNode+j, uid(5, i, j),
		app, j%9, suffix[:5], DumpNodeName(i), suffix[:5])
	if ip == "" {
		fmt.Fprintf(w, `    conditions:
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:00Z"
      message: 'containers with unready status: [app]'
      reason: ContainersNotReady
      status: "False"
      type: Ready
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:00Z"
      status: "True"
      type: PodScheduled
    hostIP: %s
    phase: Pending
    qosClass: Burstable
`, hostIP)
		return
	}
	fmt.Fprintf(w, `    conditions:
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:02Z"
      status: "True"
      type: PodReadyToStartContainers
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:00Z"
      status: "True"
      type: Initialized
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:09Z"
      status: "True"
      type: Ready
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:09Z"
      status: "True"
      type: ContainersReady
    - lastProbeTime: null
      lastTransitionTime: "2025-05-01T10:00:00Z"
      status: "True"
      type: PodScheduled
    containerStatuses:
    - containerID: containerd://%064x
      image: registry.example.com/shop/app-%03d:1.%d.0
      imageID: registry.example.com/shop/app-%03d@sha256:%064x
      lastState: {}
      name: app
      ready: true
      restartCount: 0
      started: true
      state:
        running:
          startedAt: "2025-05-01T10:00:03Z"
      volumeMounts:
      - mountPath: /var/run/secrets/kubernetes.io/serviceaccount
        name: kube-api-access-%s
        readOnly: true
        recursiveReadOnly: Disabled
    hostIP: %s
    hostIPs:
    - ip: %s
    phase: Running
    podIP: %s
    podIPs:
    - ip: %s
    qosClass: Burstable
    startTime: "2025-05-01T10:00:00Z"
`, i*perNode+j, app, j%9, app, app, suffix[:5], hostIP, hostIP, ip, ip)
}
