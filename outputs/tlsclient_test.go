package outputs_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusampler/gpusampler/outputs"
)

// writeCert writes a self-signed certificate and its key as PEM files.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for f, b := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

func TestTLSClientLoad(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name    string
		c       outputs.TLSClient
		wantErr string // "" for none
		check   func(*tls.Config) bool
	}{
		{"nothing set", outputs.TLSClient{}, "", func(c *tls.Config) bool { return c == nil }},
		{"server name only", outputs.TLSClient{ServerName: "db"}, "",
			func(c *tls.Config) bool {
				return c.ServerName == "db" && c.RootCAs == nil && c.MinVersion == tls.VersionTLS12
			}},
		{"skip verify", outputs.TLSClient{InsecureSkipVerify: true}, "", func(c *tls.Config) bool { return c.InsecureSkipVerify }},
		{"ca", outputs.TLSClient{CA: cert}, "", func(c *tls.Config) bool { return c.RootCAs != nil && len(c.Certificates) == 0 }},
		{"client cert", outputs.TLSClient{Cert: cert, Key: key}, "", func(c *tls.Config) bool { return len(c.Certificates) == 1 }},
		{"ca missing", outputs.TLSClient{CA: missing}, "tls_ca: open " + missing, nil},
		{"ca not pem", outputs.TLSClient{CA: notPEM}, "tls_ca: " + notPEM + " holds no PEM certificate", nil},
		{"cert missing", outputs.TLSClient{Cert: missing, Key: key}, "tls_cert/tls_key: open " + missing, nil},
		{"key not pem", outputs.TLSClient{Cert: cert, Key: notPEM}, "tls_cert/tls_key: ", nil},
		{"key without cert", outputs.TLSClient{Key: key}, "tls_cert/tls_key: ", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.Load()
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("Load() error %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(got) {
				t.Fatalf("Load() = %+v", got)
			}
		})
	}
}
