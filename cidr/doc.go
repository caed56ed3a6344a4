// Package cidr is the pure address arithmetic of cidrshift: parsing and
// validating CIDRs the way users type them and the way Kubernetes components
// read them, capacity math per IP family, conflict analysis between named
// ranges, a subnet allocator that can reproduce kube-controller-manager's
// order, offset-preserving rebasing from one range to another, and the
// kube-controller-manager start-up preflight.
//
// It knows nothing of Kubernetes objects and depends only on net/netip and
// go4.org/netipx, so every other package can share its rules.
//
// Two parsers exist on purpose. Parse and ParseList are strict: they are for
// values a person types for a new layout, and reject host bits by naming the
// network meant ("10.233.64.1/16 has host bits set; the network is
// 10.233.0.0/16"). ParseLenient and ParseListLenient read values from a running
// component the way the component does (it silently clears host bits:
// --cluster-cidr=10.244.0.0/12 means 10.240.0.0/12), returning a Warning the
// audit can report.
//
// Counts are big integers, exact for IPv6 ranges of any size. Errors wrap the
// sentinels declared here (ErrHostBitsSet, ErrRule, ErrOutOfRange, ...), and
// configurations a component would refuse are *RuleError values that name the
// component, the flag and the value.
package cidr
