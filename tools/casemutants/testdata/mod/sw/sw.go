// Package sw is casemutants' test input: two conditions in a tagless
// switch, one of which its test checks.
package sw

// Class names n.
func Class(n int) string {
	switch {
	case n < 0:
		return "negative"
	case n > 1000:
		return "large"
	}
	return "small"
}

// Double is never called by the test.
func Double(n int) int {
	return n + n
}

// Big is a constant: the cover tool gives it no block, yet it is no case
// condition.
const Big = 1000 * 1000

// Half's test came after gremlins ran: the log says its mutant is not
// covered, and -uncovered runs it.
func Half(n int) int {
	return n / 2
}
