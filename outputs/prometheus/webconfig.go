package prometheus

import (
	"crypto/tls"
	"fmt"
	"os"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// webConfigFindings reads an exporter-toolkit web config as the toolkit
// does (strict YAML over its defaults: TLS 1.2 to 1.3) and reports what it
// would serve that is probably not meant. A problem: an empty file, which
// serves plain HTTP without authentication, as no web_config would.
// Warnings: basic auth without TLS (passwords cross the network in clear),
// a file with neither TLS nor basic auth, and TLS that allows versions
// before 1.2 (deprecated by RFC 8996). Each names the file and its key.
// Whether the file is otherwise valid is web.Validate's to say.
func webConfigFindings(path string) (problems, warnings []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var keys map[string]any
	if err := yaml.Unmarshal(b, &keys); err != nil {
		return nil, nil, err
	}
	if len(keys) == 0 {
		return []string{fmt.Sprintf("%s is empty: it would serve plain HTTP without authentication, as no web_config does; set tls_server_config and basic_auth_users in it, or remove web_config", path)}, nil, nil
	}
	c := web.Config{TLSConfig: web.TLSConfig{MinVersion: tls.VersionTLS12, MaxVersion: tls.VersionTLS13},
		HTTPConfig: web.HTTPConfig{HTTP2: true}}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return nil, nil, err
	}
	hasTLS := c.TLSConfig.IsEnabled()
	switch {
	case !hasTLS && len(c.Users) > 0:
		warnings = append(warnings, fmt.Sprintf("%s: basic_auth_users without tls_server_config: passwords cross the network in clear (base64) on plain HTTP", path))
	case !hasTLS:
		warnings = append(warnings, fmt.Sprintf("%s: neither tls_server_config nor basic_auth_users: plain HTTP without authentication", path))
	}
	if hasTLS && c.TLSConfig.MinVersion < tls.VersionTLS12 {
		warnings = append(warnings, fmt.Sprintf("%s: tls_server_config.min_version %s allows TLS versions before 1.2, deprecated (RFC 8996): use TLS12 or TLS13",
			path, tls.VersionName(uint16(c.TLSConfig.MinVersion))))
	}
	return nil, warnings, nil
}
