package nodecidr

import _ "embed"

//go:embed rbac.yaml
var clusterRoleYAML string

// ClusterRoleYAML returns the minimal ClusterRole Apply needs, ready to
// `kubectl apply -f -`: get, list, create, delete and patch on nodes, list
// and delete on pods for the DeleteNodePods hook, get, create and update on
// leases for the Lock, and get, list, create, update and delete on
// configmaps for the ClusterJournal.
func ClusterRoleYAML() string { return clusterRoleYAML }
