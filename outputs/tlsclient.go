package outputs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/gpusampler/gpusampler/config"
)

// TLSClient names a network output's client TLS files and settings, set
// by the keys tls_ca, tls_cert, tls_key, tls_server_name and
// insecure_skip_verify. Every output that dials a server with TLS loads
// it here, so they read the same files the same way and word their errors
// alike (each names its key).
type TLSClient struct {
	// CA is a PEM file of CAs that verify the server (default: the
	// system's).
	CA string
	// Cert and Key are the client certificate and key (PEM), both or
	// neither.
	Cert, Key string
	// ServerName overrides the name verified in the server's certificate.
	ServerName string
	// InsecureSkipVerify disables server verification (tests only).
	InsecureSkipVerify bool
}

// Load builds the *tls.Config, TLS 1.2 at the least, reading the files;
// nil when nothing is set (the output then dials as its URL says).
func (c TLSClient) Load() (*tls.Config, error) {
	if c == (TLSClient{}) {
		return nil, nil
	}
	tc := &tls.Config{ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls_ca: %s holds no PEM certificate", c.CA)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" || c.Key != "" {
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			return nil, fmt.Errorf("tls_cert/tls_key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ParseTLSClient decodes the keys tls_ca, tls_cert, tls_key,
// tls_server_name and insecure_skip_verify of a block, reporting a
// certificate without its key (or the reverse) at the missing key.
func ParseTLSClient(t *config.Table) TLSClient {
	var c TLSClient
	t.String("tls_ca", &c.CA)
	t.String("tls_cert", &c.Cert)
	t.String("tls_key", &c.Key)
	t.String("tls_server_name", &c.ServerName)
	t.Bool("insecure_skip_verify", &c.InsecureSkipVerify)
	if (c.Cert == "") != (c.Key == "") {
		k := "tls_cert"
		if c.Key == "" {
			k = "tls_key"
		}
		t.Errorf(k, "tls_cert and tls_key go together (a client certificate needs its key)")
	}
	return c
}
