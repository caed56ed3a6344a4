package migrate

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// podFlag returns the value of a flag on the command line of a pod's
// container (--flag=value or --flag value; the last one wins, as in the
// component's own flag parsing).
func podFlag(p *corev1.Pod, container, flag string) (string, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name != container && len(p.Spec.Containers) > 1 {
			continue
		}
		val, found := "", false
		args := append(slices.Clone(c.Command), c.Args...)
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				val, found = v, true
			} else if a == flag && i+1 < len(args) {
				val, found = args[i+1], true
			}
		}
		return val, found
	}
	return "", false
}
