package prometheus

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpusampler/gpusampler/outputs"
)

// writeServerCert writes a self-signed server.crt and server.key for
// 127.0.0.1 into dir and returns the certificate (DER).
func writeServerCert(t *testing.T, dir string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpusampler-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	if err := os.WriteFile(filepath.Join(dir, "server.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return der
}

// A web config that is empty is refused; one with basic auth but no TLS,
// with neither, or with TLS from 1.0 is accepted with a warning naming the
// file and the key, by config --check (Check) and at start (New, logged).
func TestWebConfigFindings(t *testing.T) {
	dir := t.TempDir()
	writeServerCert(t, dir)
	hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	tlsConf := "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
	users := "basic_auth_users:\n  prom: " + string(hash) + "\n"
	for _, tc := range []struct {
		name, doc       string
		problem, warned string // what Check reports ("" none)
	}{
		{"empty", "", "is empty: it would serve plain HTTP without authentication", ""},
		{"comments only", "# nothing yet\n", "is empty", ""},
		{"basic auth without TLS", users, "", "basic_auth_users without tls_server_config: passwords cross the network in clear"},
		{"neither", "http_server_config:\n  http2: false\n", "", "neither tls_server_config nor basic_auth_users: plain HTTP without authentication"},
		{"TLS 1.0", tlsConf + "  min_version: TLS10\n" + users, "", "tls_server_config.min_version TLS 1.0 allows TLS versions before 1.2"},
		{"TLS and basic auth", tlsConf + users, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := Options{WebConfig: path}
			problems, warnings := Check(&outputs.Block{Kind: "prometheus", Line: 3, Options: opts}, opts)
			check := func(what string, got []string, want string) {
				if want == "" {
					if len(got) > 0 {
						t.Errorf("%s %q, want none", what, got)
					}
					return
				}
				if len(got) != 1 || !strings.Contains(got[0], want) || !strings.Contains(got[0], path) || !strings.Contains(got[0], "web_config") {
					t.Errorf("%s %q, want one naming web_config, %s and %q", what, got, path, want)
				}
			}
			var ps, ws []string
			for _, p := range problems {
				ps = append(ps, p.Error())
			}
			for _, w := range warnings {
				ws = append(ws, w.Error())
			}
			check("problems", ps, tc.problem)
			check("warnings", ws, tc.warned)

			var logged bytes.Buffer
			opts.Listen = "127.0.0.1:0"
			opts.Logger = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
			o, err := New(opts)
			if tc.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tc.problem) {
					o.Close()
					t.Fatalf("New: %v, want an error containing %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o.Close()
			if tc.warned != "" && (!strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), tc.warned)) {
				t.Errorf("New logged %q, want a WARN with %q", logged.String(), tc.warned)
			}
			if tc.warned == "" && logged.Len() > 0 {
				t.Errorf("New logged %q, want nothing", logged.String())
			}
		})
	}
}
