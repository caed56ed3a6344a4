// Package assert is a stub of testify's, with the signatures testlint reads.
package assert

import "time"

type TestingT interface {
	Errorf(format string, args ...any)
}

type CollectT struct{}

func (*CollectT) Errorf(string, ...any) {}
func (*CollectT) FailNow()              {}

func Contains(t TestingT, s, contains any, msgAndArgs ...any) bool        { return true }
func NotContains(t TestingT, s, contains any, msgAndArgs ...any) bool     { return true }
func Containsf(t TestingT, s, contains any, msg string, args ...any) bool { return true }
func Subset(t TestingT, list, subset any, msgAndArgs ...any) bool         { return true }
func NotSubset(t TestingT, list, subset any, msgAndArgs ...any) bool      { return true }
func Equal(t TestingT, expected, actual any, msgAndArgs ...any) bool      { return true }
func NotEqual(t TestingT, expected, actual any, msgAndArgs ...any) bool   { return true }
func NotNil(t TestingT, object any, msgAndArgs ...any) bool               { return true }
func True(t TestingT, value bool, msgAndArgs ...any) bool                 { return true }
func False(t TestingT, value bool, msgAndArgs ...any) bool                { return true }
func NoError(t TestingT, err error, msgAndArgs ...any) bool               { return true }
func Eventually(t TestingT, condition func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	return true
}
func EventuallyWithT(t TestingT, condition func(c *CollectT), waitFor, tick time.Duration, msgAndArgs ...any) bool {
	return true
}

type Assertions struct{}

func New(t TestingT) *Assertions                                        { return nil }
func (*Assertions) NotContains(s, contains any, msgAndArgs ...any) bool { return true }
