package flannel

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strconv"
)

// LeaseAttrs is the value of a subnet lease key as flanneld writes it:
//
//	{"PublicIP":"192.168.1.10","PublicIPv6":null,"BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"..."}}
//
// Decoding is as lenient as flanneld's (field names match case-insensitively,
// unknown fields are ignored). The raw value is kept next to it in Lease, so
// a lease moved to another key is written back byte for byte.
type LeaseAttrs struct {
	// PublicIP is the node address other nodes reach this subnet through.
	PublicIP netip.Addr `json:"PublicIP,omitzero"`
	// PublicIPv6 is the node's IPv6 address for dual-stack leases.
	PublicIPv6 netip.Addr `json:"PublicIPv6,omitzero"`
	// BackendType is the backend of the flanneld that wrote the lease.
	BackendType string `json:"BackendType,omitempty"`
	// BackendData is backend-specific (the VXLAN VTEP MAC, ...).
	BackendData json.RawMessage `json:"BackendData,omitempty"`
	// BackendV6Data is the IPv6 counterpart of BackendData.
	BackendV6Data json.RawMessage `json:"BackendV6Data,omitempty"`
}

// ParseLeaseAttrs decodes a lease value. It fails with ErrBadLease when
// flanneld could not read the value either (flanneld then ignores the lease
// and may hand its subnet to another node), and when PublicIP is an IPv6
// address (flanneld panics on such a value).
func ParseLeaseAttrs(data []byte) (LeaseAttrs, error) {
	var raw struct {
		PublicIP      json.RawMessage
		PublicIPv6    json.RawMessage
		BackendType   string
		BackendData   json.RawMessage
		BackendV6Data json.RawMessage
	}
	bad := func(reason string) error {
		return &ParseError{What: "lease value", Input: string(data), Reason: reason, Err: ErrBadLease}
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return LeaseAttrs{}, bad(`must be a JSON object such as {"PublicIP":"192.168.1.10","BackendType":"vxlan"}`)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return LeaseAttrs{}, bad(te.Field + " must be a JSON " + te.Type.String())
		}
		return LeaseAttrs{}, bad("not valid JSON: " + err.Error())
	}
	if _, err := dec.Token(); err == nil {
		return LeaseAttrs{}, bad("unexpected data after the JSON object")
	}
	a := LeaseAttrs{BackendType: raw.BackendType, BackendData: raw.BackendData, BackendV6Data: raw.BackendV6Data}
	if raw.PublicIP != nil {
		s, ok := jsonString(raw.PublicIP)
		ip, err := netip.ParseAddr(s)
		switch {
		case !ok || err != nil || ip.Zone() != "":
			return LeaseAttrs{}, bad("PublicIP " + string(raw.PublicIP) + " is not an IP address string")
		case !ip.Unmap().Is4():
			return LeaseAttrs{}, bad("PublicIP " + strconv.Quote(s) + " must be an IPv4 address (IPv6 goes in PublicIPv6)")
		}
		a.PublicIP = ip.Unmap()
	}
	if raw.PublicIPv6 != nil && string(raw.PublicIPv6) != "null" {
		s, ok := jsonString(raw.PublicIPv6)
		ip, err := netip.ParseAddr(s)
		if !ok || err != nil || ip.Zone() != "" {
			return LeaseAttrs{}, bad("PublicIPv6 " + string(raw.PublicIPv6) + " is not an IP address string")
		}
		a.PublicIPv6 = ip
	}
	return a, nil
}

// Lease is one subnet lease read from etcd.
type Lease struct {
	// Key is the full etcd key, e.g. /coreos.com/network/subnets/10.5.34.0-24.
	Key string `json:"key"`
	// Subnet is what the key names.
	Subnet SubnetKey `json:"subnet"`
	// Attrs is the decoded value.
	Attrs LeaseAttrs `json:"attrs"`
	// Value is the value exactly as stored.
	Value string `json:"value"`
	// CreateRevision, ModRevision and Version are the key's etcd metadata. A
	// renewal by flanneld changes ModRevision.
	CreateRevision int64 `json:"createRevision"`
	ModRevision    int64 `json:"modRevision"`
	Version        int64 `json:"version"`
	// LeaseID is the etcd lease attached to the key (flanneld grants a 24 h
	// lease and renews it about an hour before it expires). Zero means no etcd
	// lease: a reservation that never expires.
	LeaseID int64 `json:"leaseID,omitempty"`
	// TTLSeconds is the time the etcd lease has left, in seconds; -1 when the
	// lease is gone or unknown, 0 for a reservation.
	TTLSeconds int64 `json:"ttlSeconds"`
	// GrantedTTLSeconds is the TTL the etcd lease was granted with.
	GrantedTTLSeconds int64 `json:"grantedTTLSeconds,omitempty"`
}

// BadLease is a key under <prefix>/subnets/ that flanneld cannot read: its
// name is not a subnet key or its value is not a lease. flanneld skips such
// keys, so the subnet they meant to hold counts as free.
type BadLease struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ModRevision int64  `json:"modRevision"`
	LeaseID     int64  `json:"leaseID,omitempty"`
	// Error says why flanneld cannot read it.
	Error string `json:"error"`
	// Subnet is set when the key parsed but the value did not.
	Subnet SubnetKey `json:"subnet,omitzero"`
}
