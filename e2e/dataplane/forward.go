package dataplane

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
)

// Forwarder listens inside a namespace and relays each connection to an
// address in the root namespace (the harness's control plane on
// 127.0.0.1). Only its listening socket is in the namespace: no address is
// added to the root namespace.
type Forwarder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Forward listens on addr:port in namespace ns and relays to target
// ("127.0.0.1:port"). Teardown closes it.
func (e *Env) Forward(ns string, addr netip.Addr, port int, target string) (*Forwarder, error) {
	var ln net.Listener
	err := inNS(ns, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, err
	}
	f := &Forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	e.Track(f)
	return f, nil
}

func (f *Forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		if f.conns == nil {
			return false
		}
		f.conns[c] = struct{}{}
		return true
	}
	delete(f.conns, c)
	return true
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			// This goroutine's thread is in the root namespace: the dial
			// reaches the harness on loopback.
			out, err := net.Dial("tcp4", f.target)
			if err != nil {
				in.Close()
				return
			}
			if !f.track(in, true) || !f.track(out, true) {
				in.Close()
				out.Close()
				return
			}
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
			in.Close()
			out.Close()
			<-done
			f.track(in, false)
			f.track(out, false)
		}()
	}
}

// Close stops listening and closes every relayed connection.
func (f *Forwarder) Close() error {
	err := f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.wg.Wait()
	return err
}
