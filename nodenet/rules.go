package nodenet

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
)

// The iptables tables and chains nodenet reads and may change, besides
// flannel's own chains.
const (
	tableNAT         = "nat"
	tableFilter      = "filter"
	chainPostrouting = "POSTROUTING"
)

// flanneld's chains (pkg/trafficmngr/iptables).
const (
	// ChainFlannelPostrouting is flannel's nat chain of masquerade rules.
	ChainFlannelPostrouting = "FLANNEL-POSTRTG"
	// ChainFlannelForward is flannel's filter chain of forward rules.
	ChainFlannelForward = "FLANNEL-FWD"
)

// keepComment marks the RETURN rules nodenet inserts into FLANNEL-POSTRTG
// to keep old pods' source addresses; nodenet deletes them, never rewrites
// them, once no pod holds an old address.
const keepComment = "cidrshift nodenet: keep old pod addresses"

// watchedChains are the chains Audit reads, in order.
var watchedChains = []struct{ table, chain string }{
	{tableNAT, chainPostrouting},
	{tableNAT, ChainFlannelPostrouting},
	{tableFilter, ChainFlannelForward},
}

func watched(table, chain string) bool {
	for _, c := range watchedChains {
		if c.table == table && c.chain == chain {
			return true
		}
	}
	return false
}

var errRuleSyntax = errors.New("cannot read iptables -S line")

// parseRuleLine reads one line of `iptables -S CHAIN` output. It returns ok
// false for lines that are not rules ("-N CHAIN", "-P CHAIN POLICY").
// iptables quotes words holding other characters than letters, digits, '_'
// and '-' with double quotes, escaping '"', '\' and '\” with a backslash.
func parseRuleLine(line string) (chain string, spec []string, ok bool, err error) {
	words, err := splitWords(line)
	if err != nil {
		return "", nil, false, err
	}
	if len(words) < 2 || words[0] != "-A" {
		return "", nil, false, nil
	}
	return words[1], words[2:], true, nil
}

func splitWords(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote bool
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote && c == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case quote && c == '"':
			quote = false
		case quote:
			cur.WriteByte(c)
		case c == '"':
			quote, in = true, true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote {
		return nil, errRuleSyntax
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// joinSpec renders a rule specification, quoting words the way iptables -S
// does.
func joinSpec(spec []string) string {
	out := make([]string, len(spec))
	for i, w := range spec {
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:!,") == "" {
			out[i] = w
			continue
		}
		var b strings.Builder
		b.WriteByte('"')
		for j := 0; j < len(w); j++ {
			if w[j] == '"' || w[j] == '\\' || w[j] == '\'' {
				b.WriteByte('\\')
			}
			b.WriteByte(w[j])
		}
		b.WriteByte('"')
		out[i] = b.String()
	}
	return strings.Join(out, " ")
}

// ruleCIDR is an address match of a rule (-s or -d).
type ruleCIDR struct {
	// index is the position of the value in the spec.
	index  int
	prefix netip.Prefix
	// neg is set for "! -s" and "! -d".
	neg bool
}

// ruleCIDRs returns the IPv4 source and destination matches of spec.
func ruleCIDRs(spec []string) []ruleCIDR {
	var out []ruleCIDR
	for i := 0; i+1 < len(spec); i++ {
		switch spec[i] {
		case "-s", "--source", "-d", "--destination":
		default:
			continue
		}
		v := spec[i+1]
		p, err := netip.ParsePrefix(v)
		if err != nil {
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Is4() {
			out = append(out, ruleCIDR{index: i + 1, prefix: p.Masked(), neg: i > 0 && spec[i-1] == "!"})
		}
	}
	return out
}

// ruleTarget returns the rule's -j target.
func ruleTarget(spec []string) string {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == "-j" || spec[i] == "--jump" {
			return spec[i+1]
		}
	}
	return ""
}

// hasComment reports whether spec carries comment c.
func hasComment(spec []string, c string) bool {
	for i := 0; i+1 < len(spec); i++ {
		if spec[i] == "--comment" && spec[i+1] == c {
			return true
		}
	}
	return false
}

// forbiddenRuleWords are iptables commands and options that do not belong in
// a rule specification: a plan carrying one would act on another table or
// chain than it says.
var forbiddenRuleWords = []string{"-t", "--table", "-A", "--append", "-I", "--insert", "-D", "--delete", "-R", "--replace",
	"-N", "--new-chain", "-X", "--delete-chain", "-F", "--flush", "-P", "--policy", "-Z", "--zero", "-E", "--rename-chain",
	"-L", "--list", "-S", "--list-rules", "-C", "--check", "--modprobe"}

// checkSpec reports what is wrong with a rule specification from a plan, or "".
func checkSpec(spec []string) string {
	if len(spec) == 0 {
		return "is empty"
	}
	for _, w := range spec {
		if slices.Contains(forbiddenRuleWords, w) {
			return "holds the iptables command " + w
		}
		if strings.ContainsAny(w, "\x00\n\r") {
			return "holds a control character"
		}
	}
	return ""
}
