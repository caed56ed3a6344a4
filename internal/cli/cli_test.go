package cli

import (
	"bytes"
	"math/big"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type sample struct {
	Name  string   `json:"name"`
	Count *big.Int `json:"count"`
	Ratio float64  `json:"ratio"`
	Tags  []string `json:"tags"`
	Empty *string  `json:"empty"`
	OK    bool     `json:"ok"`
}

func TestWriteKeepsBigIntegersExact(t *testing.T) {
	huge, _ := new(big.Int).SetString("340282366920938463463374607431768211456", 10)
	v := sample{Name: "::/0", Count: huge, Ratio: 0.5, Tags: []string{"a"}, OK: true}
	var y bytes.Buffer
	require.NoError(t, Write(&y, "yaml", v))
	assert.Equal(t, "count: 340282366920938463463374607431768211456\nempty: null\nname: ::/0\nok: true\nratio: 0.5\ntags:\n  - a\n", y.String())
	var j bytes.Buffer
	require.NoError(t, Write(&j, "json", v))
	assert.Contains(t, j.String(), `"count": 340282366920938463463374607431768211456`)
	assert.EqualError(t, Write(&j, "xml", v), `-o "xml": want text, json or yaml`)
	assert.NoError(t, CheckFormat("text"))
}

func TestRESTConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
- name: d
  cluster: {server: "https://127.0.0.2:6443"}
users:
- name: u
  user: {token: abc}
contexts:
- name: one
  context: {cluster: c, user: u}
- name: two
  context: {cluster: d, user: u}
current-context: one
`), 0o600))
	cfg, err := RESTConfig(path, "")
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.1:6443", cfg.Host)
	assert.Equal(t, float32(50), cfg.QPS, "client-side throttling must not stretch delete-to-create gaps")
	assert.Equal(t, 100, cfg.Burst)
	cfg, err = RESTConfig(path, "two")
	require.NoError(t, err)
	assert.Equal(t, "https://127.0.0.2:6443", cfg.Host)
	_, err = RESTConfig(path, "three")
	assert.ErrorContains(t, err, "loading kubeconfig")
}
