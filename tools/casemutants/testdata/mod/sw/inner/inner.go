// Package inner is outside sw's coverage profile, as a test helper
// package is: its mutants lie in no block of sw's profile.
package inner

// Sign names the sign of n.
func Sign(n int) string {
	switch {
	case n < 0:
		return "-"
	}
	return "+"
}
