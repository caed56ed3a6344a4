// Package testing is a stub of client-go's, with the signatures testlint reads.
package testing

type Action interface{ GetVerb() string }

type ReactionFunc func(action Action) (handled bool, ret any, err error)

type Fake struct{}

func (*Fake) PrependReactor(verb, resource string, reaction ReactionFunc) {}
func (*Fake) AddReactor(verb, resource string, reaction ReactionFunc)     {}
