package nats

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Placeholders a subject template may use. Which ones a template allows
// depends on what it names: the samples subject all, the events subject
// all but {group}, the self-metrics subject {host} and tags only.
const (
	PhHost     = "host"      // the host name (hostname override)
	PhGPU      = "gpu"       // the device's UUID, or its index with gpu = "index"
	PhGPUUUID  = "gpu_uuid"  // the device's UUID
	PhGPUIndex = "gpu_index" // the device's index
	PhGroup    = "group"     // the metric's group (power, utilization, ...)
	phTag      = "tag:"      // {tag:NAME}: the global tag NAME
)

var (
	sampleHolders = []string{PhHost, PhGPU, PhGPUUUID, PhGPUIndex, PhGroup}
	eventHolders  = []string{PhHost, PhGPU, PhGPUUUID, PhGPUIndex}
	selfHolders   = []string{PhHost}
)

// template is a parsed subject template: literal text and placeholders.
type template struct {
	src   string
	parts []tmplPart
}

type tmplPart struct {
	lit string // literal text, or
	ph  string // a placeholder name ("tag:cluster" for a tag)
}

// parseTemplate parses s, allowing the given placeholders (and {tag:NAME}).
// The result must be a valid publish subject: tokens separated by dots, none
// empty, no wildcards or whitespace in the literal text.
func parseTemplate(s string, allowed []string) (template, error) {
	t := template{src: s}
	if s == "" {
		return t, errors.New("empty subject")
	}
	rest := s
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, tmplPart{lit: rest})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, tmplPart{lit: rest[:i]})
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return t, fmt.Errorf("%q: unterminated {", s)
		}
		name := rest[i+1 : i+j]
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		if strings.HasPrefix(name, phTag) && len(name) > len(phTag) {
			known = true
		}
		if !known {
			return t, fmt.Errorf("%q: unknown placeholder {%s} (known: {%s}, {tag:NAME})", s, name, strings.Join(allowed, "}, {"))
		}
		t.parts = append(t.parts, tmplPart{ph: name})
		rest = rest[i+j+1:]
	}
	// Placeholders render as one sanitized token: check the literal frame.
	probe := t.render(func(string) string { return "x" })
	for _, tok := range strings.Split(probe, ".") {
		if tok == "" {
			return t, fmt.Errorf("%q: empty token (leading, trailing or double dot)", s)
		}
		if strings.ContainsAny(tok, "*>") || strings.ContainsFunc(tok, unicode.IsSpace) {
			return t, fmt.Errorf("%q: token %q: wildcards and whitespace are not allowed in a publish subject", s, tok)
		}
	}
	return t, nil
}

// render returns the subject with each placeholder replaced by value(name)
// (which the caller sanitizes).
func (t template) render(value func(ph string) string) string {
	var b strings.Builder
	for _, p := range t.parts {
		if p.ph != "" {
			b.WriteString(value(p.ph))
		} else {
			b.WriteString(p.lit)
		}
	}
	return b.String()
}

// tags returns the global tag names the template refers to.
func (t template) tags() []string {
	var out []string
	for _, p := range t.parts {
		if name, ok := strings.CutPrefix(p.ph, phTag); ok {
			out = append(out, name)
		}
	}
	return out
}

// prefix returns the literal tokens before the first placeholder
// ("gpusampler."), or "" when the template starts with one.
func (t template) prefix() string {
	if len(t.parts) == 0 || t.parts[0].ph != "" {
		return ""
	}
	lit := t.parts[0].lit
	if len(t.parts) == 1 {
		return lit
	}
	i := strings.LastIndexByte(lit, '.')
	return lit[:i+1]
}

// Sanitize turns s into one valid subject token (DESIGN.md §5): dots,
// wildcards ('*', '>'), whitespace and control characters become '_', so
// does a leading '$' (reserved for system subjects); an empty s becomes "_".
func Sanitize(s string) string {
	if s == "" {
		return "_"
	}
	clean := true
	for i, r := range s {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || (i == 0 && r == '$') {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || (i == 0 && r == '$') {
			r = '_'
		}
		b.WriteRune(r)
	}
	return b.String()
}
