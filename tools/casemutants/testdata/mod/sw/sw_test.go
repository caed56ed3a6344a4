package sw

import "testing"

// The test checks the first case only: a mutant of n > 1000 lives.
func TestClass(t *testing.T) {
	if Class(-1) != "negative" || Class(0) != "small" {
		t.Fatal("Class is wrong")
	}
}

func TestHalf(t *testing.T) {
	if Half(4) != 2 {
		t.Fatal("Half is wrong")
	}
}
