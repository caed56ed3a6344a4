// Command testlint reports two defects of tests that pass when they should
// fail (issue 21), in the packages it is given, test files included:
//
//   - A call that stops the test (testify's require, t.Fatal, t.FailNow,
//     t.Skip, t.TempDir, or a helper that makes one on the T it is given)
//     inside a function that runs off the test goroutine: a go statement,
//     WaitGroup.Go, a fake clientset's reactor, the condition of
//     Eventually or Never, an HTTP handler. There the call ends only its
//     own goroutine (runtime.Goexit): a worker dies, the code under test
//     waits for it, and the run hangs until -timeout with no message, or
//     the failure is lost.
//   - A testify assertion that cannot fail because of its argument types:
//     testify compares with reflect.DeepEqual, so a NotContains of a kind
//     in a slice of structs, or a NotEqual of an int and an int64, always
//     passes; so does a NotNil of a struct, or a True of a constant.
//
// Functions that run off the test goroutine in other ways (a hook or a
// progress callback the code under test calls from a worker) are not
// recognised: the types do not say where a callback runs.
//
// It is a go/analysis checker, run by make lint as a vet tool:
//
//	go build -o /tmp/testlint ./testlint   # in tools/
//	go vet -vettool=/tmp/testlint ./...    # in the root module and in e2e
package main

import "golang.org/x/tools/go/analysis/singlechecker"

func main() { singlechecker.Main(Analyzer) }
