package nodecidr

import _ "embed"

//go:embed rbac.yaml
var clusterRoleYAML string

// ClusterRoleYAML returns the minimal ClusterRole Apply needs, ready to
// `kubectl apply -f -`: get, list, create, delete and patch on nodes, plus
// list and delete on pods for the DeleteNodePods hook.
func ClusterRoleYAML() string { return clusterRoleYAML }
