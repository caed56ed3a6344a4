// Package require is a stub of testify's, with the signatures testlint reads.
package require

import "time"

type TestingT interface {
	Errorf(format string, args ...any)
	FailNow()
}

func NoError(t TestingT, err error, msgAndArgs ...any)           {}
func Equal(t TestingT, expected, actual any, msgAndArgs ...any)  {}
func NotContains(t TestingT, s, contains any, msgAndArgs ...any) {}
func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
}

type Assertions struct{}

func New(t TestingT) *Assertions                         { return nil }
func (*Assertions) NoError(err error, msgAndArgs ...any) {}
