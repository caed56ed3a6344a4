package dataplane

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EchoPort is the port every echo server listens on.
const EchoPort = 7777

// EchoServer is a TCP server whose socket lives in a pod's (or the outside)
// namespace. To each connection it answers one line, "<name> <source
// address it saw>", and closes it: the answer names who answered (a
// duplicate address shows up as the wrong responder) and whether the
// client's address was rewritten on the way.
type EchoServer struct {
	Name string
	ln   net.Listener
	wg   sync.WaitGroup
}

// StartEcho starts an echo server in namespace ns on addr:port (any address
// when addr is invalid). Teardown closes it.
func (e *Env) StartEcho(ns, name string, addr netip.Addr, port int) (*EchoServer, error) {
	host, network := "0.0.0.0", "tcp4"
	if addr.IsValid() {
		host = addr.String()
	}
	if addr.Is6() {
		network = "tcp6"
	}
	var ln net.Listener
	err := inNS(ns, func() error {
		var err error
		ln, err = net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("echo %s in %s: %w", name, ns, err)
	}
	s := &EchoServer{Name: name, ln: ln}
	s.wg.Add(1)
	go s.serve()
	e.Track(s)
	return s, nil
}

func (s *EchoServer) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			src, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = fmt.Fprintf(c, "%s %s\n", s.Name, src)
		}()
	}
}

// Close stops the server.
func (s *EchoServer) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

// EchoReply is what a probe saw.
type EchoReply struct {
	// Responder is the name of the echo server that answered.
	Responder string
	// Source is the client address the server saw.
	Source netip.Addr
}

// Probe connects from namespace ns to dst and reads the echo line.
func Probe(ns string, dst netip.AddrPort, timeout time.Duration) (EchoReply, error) {
	var c net.Conn
	err := inNS(ns, func() error {
		var err error
		network := "tcp4"
		if dst.Addr().Is6() {
			network = "tcp6"
		}
		c, err = net.DialTimeout(network, dst.String(), timeout)
		return err
	})
	if err != nil {
		return EchoReply{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(io.LimitReader(c, 256)).ReadString('\n')
	if err != nil {
		return EchoReply{}, fmt.Errorf("read echo: %w", err)
	}
	name, src, ok := strings.Cut(strings.TrimSpace(line), " ")
	if !ok {
		return EchoReply{}, fmt.Errorf("bad echo line %q", line)
	}
	a, err := netip.ParseAddr(src)
	if err != nil {
		return EchoReply{}, fmt.Errorf("bad echo line %q: %w", line, err)
	}
	return EchoReply{Responder: name, Source: a}, nil
}
