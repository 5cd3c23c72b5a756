package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	toml "github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// Error is one problem in a config file, at one key. Its text is one line:
// "file:line: key: message".
type Error struct {
	File string
	Line int
	// Key is the dotted path of the key ("outputs.stdout[1].format"); empty
	// for syntax errors that are not about one key.
	Key string
	Msg string
}

func (e *Error) Error() string {
	msg := elide(quoted.ReplaceAllStringFunc(e.Msg, func(q string) string { return elide(q, maxQuoted) }), maxMsg)
	if e.Key == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, elide(e.Key, maxKey), msg)
}

// An error's text shows at most this much of a key, of a quoted value in
// its message and of the message: a 10 MB key or value is shown by its
// start and its length, not echoed whole.
const (
	maxKey    = 200
	maxQuoted = 200
	maxMsg    = 2000
)

// quoted matches a double-quoted string as %q writes it.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// elide returns s when it is at most max bytes long, else its first bytes
// (whole UTF-8 characters) and how long it is.
func elide(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max / 2
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// Errors is every problem found in one file, in line order. Its text has one
// line per problem.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// document is one parsed file: its decoded tree, the line of every key, and
// the problems found so far.
type document struct {
	file  string
	lines map[string]int // key path → line
	errs  Errors
	// envRefs are the ${NAME} references, by the key path of the value
	// that holds them, with the values they expanded to.
	envRefs map[string]map[string]string
	// written holds each string that referenced a ${NAME}, as written, by
	// the key path of its value.
	written map[string]string
}

// redact replaces in msg every value that a ${NAME} of the file expanded
// to with the reference itself, so that a problem names the variable and
// never prints its value (a secret, often). Values shorter than 3 bytes
// are left alone: they reveal little and would match too much.
func (d *document) redact(msg string) string {
	if len(d.envRefs) == 0 {
		return msg
	}
	seen := map[string]string{} // value → reference
	for _, refs := range d.envRefs {
		for name, val := range refs {
			if len(val) >= 3 {
				seen[val] = "${" + name + "}"
			}
		}
	}
	vals := slices.Collect(maps.Keys(seen))
	slices.SortFunc(vals, func(a, b string) int { return len(b) - len(a) }) // longest first
	for _, v := range vals {
		msg = strings.ReplaceAll(msg, v, seen[v])
	}
	// A value can also appear quoted (%q escapes a '"' or a byte that is
	// not UTF-8) or in part (a URL parser quotes the bad escape it met,
	// "%zz"): in each quoted string the values are replaced after
	// unquoting, and a quoted string that is part of a value (2 bytes or
	// more) is replaced by the reference.
	return quoted.ReplaceAllStringFunc(msg, func(q string) string {
		u, err := strconv.Unquote(q)
		if err != nil || len(u) < 2 {
			return q
		}
		r := u
		for _, v := range vals {
			r = strings.ReplaceAll(r, v, seen[v])
		}
		if r != u {
			return strconv.Quote(r)
		}
		for _, v := range vals {
			if strings.Contains(v, u) {
				return "(part of " + seen[v] + ")"
			}
		}
		return q
	})
}

// envRefsUnder returns the NAME=value of every ${NAME} referenced by a
// value at or below key path prefix, sorted by name.
func (d *document) envRefsUnder(prefix string) []string {
	seen := map[string]string{}
	for key, refs := range d.envRefs {
		if key == prefix || strings.HasPrefix(key, prefix+".") || strings.HasPrefix(key, prefix+"[") {
			maps.Copy(seen, refs)
		}
	}
	out := make([]string, 0, len(seen))
	for name, val := range seen {
		out = append(out, name+"="+val)
	}
	slices.Sort(out)
	return out
}

func (d *document) errorf(key string, line int, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Key: key, Msg: d.redact(fmt.Sprintf(format, args...))})
}

// line returns the line of key, or of its nearest ancestor that has one.
func (d *document) line(key string) int {
	for key != "" {
		if l, ok := d.lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 1
}

func (d *document) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *Error) int { return a.Line - b.Line })
	return d.errs
}

// parseDocument decodes data and indexes the line of every key. A syntax
// error is returned as a single *Error.
func parseDocument(file string, data []byte) (*document, map[string]any, error) {
	// A UTF-8 byte-order mark (some Windows editors write one) is not TOML
	// but says nothing either: skip it.
	data = bytes.TrimPrefix(data, []byte("\xEF\xBB\xBF"))
	var tree map[string]any
	if err := toml.Unmarshal(data, &tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, nil, &Error{File: file, Line: row, Key: cmp.Or(locate(data, row), strings.Join(de.Key(), ".")),
				Msg: strings.TrimPrefix(de.Error(), "toml: ")}
		}
		return nil, nil, &Error{File: file, Line: 1, Msg: err.Error()}
	}
	if tree == nil {
		tree = map[string]any{}
	}
	d := &document{file: file, lines: make(map[string]int)}
	d.indexLines(data)
	return d, tree, nil
}

// locate names the key defined at line row (1-based) of a document that
// does not parse: the table header above it (array tables with their
// index) joined with the key on the line, or "" when the line holds no
// key. A decode error then names its section and key.
func locate(data []byte, row int) string {
	lines := strings.Split(string(data), "\n")
	if row < 1 || row > len(lines) {
		return ""
	}
	section := ""
	counts := map[string]int{}
	for _, l := range lines[:row-1] {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "[["):
			if name, _, ok := strings.Cut(l[2:], "]]"); ok {
				name = strings.TrimSpace(name)
				section = name + "[" + strconv.Itoa(counts[name]) + "]"
				counts[name]++
			}
		case strings.HasPrefix(l, "["):
			if name, _, ok := strings.Cut(l[1:], "]"); ok {
				section = strings.TrimSpace(name)
			}
		}
	}
	key, _, ok := strings.Cut(lines[row-1], "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" || strings.HasPrefix(key, "[") || strings.HasPrefix(key, "#") {
		return ""
	}
	if section == "" {
		return key
	}
	return section + "." + key
}

// indexLines walks the document's expressions and records the line of each
// table header and key. Paths name array-table elements with their index:
// "outputs.stdout[1].format".
func (d *document) indexLines(data []byte) {
	var p unstable.Parser
	p.Reset(data)
	arrays := map[string]int{} // array-table path → index of its last element
	var cur string             // resolved path of the current table
	lineOf := func(n *unstable.Node) int { return p.Shape(n.Raw).Start.Line }
	keys := func(n *unstable.Node) (parts []string, first *unstable.Node) {
		it := n.Key()
		for it.Next() {
			if first == nil {
				first = it.Node()
			}
			parts = append(parts, string(it.Node().Data))
		}
		return parts, first
	}
	// resolve turns a header's dotted parts into a path, indexing array
	// tables on the way (all parts but the last).
	resolve := func(parts []string) string {
		var out string
		for i, s := range parts {
			out = join(out, s)
			if n, ok := arrays[out]; ok && i < len(parts)-1 {
				out += "[" + strconv.Itoa(n) + "]"
			}
		}
		return out
	}
	var walkValue func(prefix string, v *unstable.Node)
	walkValue = func(prefix string, v *unstable.Node) {
		switch v.Kind {
		case unstable.InlineTable:
			it := v.Children()
			for it.Next() {
				kv := it.Node()
				parts, first := keys(kv)
				k := prefix
				for _, s := range parts {
					k = join(k, s)
					d.set(k, lineOf(first))
				}
				walkValue(k, kv.Value())
			}
		case unstable.Array:
			it := v.Children()
			for i := 0; it.Next(); i++ {
				k := prefix + "[" + strconv.Itoa(i) + "]"
				if n := it.Node(); n.Raw.Length > 0 {
					d.set(k, lineOf(n))
				}
				walkValue(k, it.Node())
			}
		}
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			parts, first := keys(e)
			cur = resolve(parts)
			d.set(cur, lineOf(first))
		case unstable.ArrayTable:
			parts, first := keys(e)
			base := resolve(parts)
			n := 0
			if last, ok := arrays[base]; ok {
				n = last + 1
			}
			arrays[base] = n
			d.set(base, lineOf(first))
			cur = base + "[" + strconv.Itoa(n) + "]"
			d.set(cur, lineOf(first))
		case unstable.KeyValue:
			parts, first := keys(e)
			k := cur
			for _, s := range parts {
				k = join(k, s)
				d.set(k, lineOf(first))
			}
			walkValue(k, e.Value())
		}
	}
}

func (d *document) set(key string, line int) {
	if _, ok := d.lines[key]; !ok {
		d.lines[key] = line
	}
}

// join appends key to a dotted path, quoting it unless it is bare. A key
// may carry array indexes ("include[1]"), which stay unquoted.
func join(prefix, key string) string {
	base, idx := key, ""
	if i := strings.IndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") && isIndexSuffix(key[i:]) {
		base, idx = key[:i], key[i:]
	}
	if !isBareKey(base) {
		base = strconv.Quote(base)
	}
	key = base + idx
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// isIndexSuffix reports whether s is one or more "[N]".
func isIndexSuffix(s string) bool {
	for s != "" {
		j := strings.IndexByte(s, ']')
		if s[0] != '[' || j < 2 {
			return false
		}
		if _, err := strconv.Atoi(s[1:j]); err != nil {
			return false
		}
		s = s[j+1:]
	}
	return true
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// expandEnv replaces ${NAME} in every string of v (recursively) with the
// variable's value; "$${" writes a literal "${". An undefined variable is an
// error at its key.
func (d *document) expandEnv(key string, v any, lookup func(string) (string, bool)) any {
	switch x := v.(type) {
	case string:
		return d.expandString(key, x, lookup)
	case map[string]any:
		for k, e := range x {
			x[k] = d.expandEnv(join(key, k), e, lookup)
		}
	case []any:
		for i, e := range x {
			x[i] = d.expandEnv(key+"["+strconv.Itoa(i)+"]", e, lookup)
		}
	}
	return v
}

func (d *document) expandString(key, s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "${") {
		return s
	}
	if d.written == nil {
		d.written = map[string]string{}
	}
	d.written[key] = s
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		if i > 0 && s[i-1] == '$' { // "$${" is a literal "${"
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			d.errorf(key, d.line(key), "unterminated ${ in %q", s)
			return b.String()
		}
		name := s[i+2 : i+j]
		val, ok := lookup(name)
		switch {
		case name == "":
			d.errorf(key, d.line(key), "empty variable name in ${}")
		case !ok:
			d.errorf(key, d.line(key), "environment variable %s is not defined", name)
		default:
			if d.envRefs == nil {
				d.envRefs = map[string]map[string]string{}
			}
			if d.envRefs[key] == nil {
				d.envRefs[key] = map[string]string{}
			}
			d.envRefs[key][name] = val
		}
		b.WriteString(val)
		s = s[i+j+1:]
	}
}

// Table is one table of a config file, handed to decoders together with the
// positions needed to report key, file and line. Getters mark the keys they
// take; Finish reports every key nobody took as unknown. Problems are
// collected (not returned) so that one run reports every bad key of a file.
//
// A Table is used by one goroutine, during parsing only.
type Table struct {
	doc   *document
	path  string
	m     map[string]any
	used  map[string]bool
	asked []string // every key a getter asked for, in order: the known keys
}

func newTable(doc *document, path string, m map[string]any) *Table {
	if m == nil {
		m = map[string]any{}
	}
	return &Table{doc: doc, path: path, m: m, used: make(map[string]bool)}
}

// NewBlockTable returns a Table over one block's values that belongs to no
// file: keys are relative to the block and errors carry no line. Plugins
// decode the block handed to their configure call with it, then return
// Err's problems by key to the host, which places them in its file.
func NewBlockTable(raw map[string]any) *Table {
	return newTable(&document{lines: map[string]int{}}, "", raw)
}

// Err returns every problem recorded so far in the table's document (an
// Errors value), or nil.
func (t *Table) Err() error { return t.doc.err() }

// Path returns the table's dotted path ("outputs.stdout[0]").
func (t *Table) Path() string { return t.path }

// File returns the config file's name.
func (t *Table) File() string { return t.doc.file }

// Key returns key's full dotted path.
func (t *Table) Key(key string) string { return join(t.path, key) }

// Line returns the line of key (or of the table when key is absent).
func (t *Table) Line(key string) int { return t.doc.line(t.Key(key)) }

// Has reports whether key is present.
func (t *Table) Has(key string) bool { _, ok := t.m[key]; return ok }

// HasErr reports whether a problem with key was recorded already (so a
// check of its value can stay quiet about a value that was never read).
func (t *Table) HasErr(key string) bool {
	k := t.Key(key)
	return slices.ContainsFunc(t.doc.errs, func(e *Error) bool { return e.Key == k })
}

// Errorf records a problem with key.
func (t *Table) Errorf(key, format string, args ...any) {
	k := t.path
	if key != "" {
		k = t.Key(key)
	}
	t.doc.errorf(k, t.doc.line(k), format, args...)
}

// Take returns key's value as decoded and marks the key as taken (known
// to Finish) — for decoders that switch on the value's type themselves.
func (t *Table) Take(key string) (any, bool) { return t.take(key) }

// Elem returns a table over m, the value found at key (which may carry an
// index: "stdout[1]" for the second [[outputs.stdout]] block), in the same
// file as t. Its keys are reported under t.Key(key).
func (t *Table) Elem(key string, m map[string]any) *Table {
	return newTable(t.doc, t.Key(key), m)
}

// ErrorAt returns (without recording it) a problem with key, a dotted path
// relative to the table written as is ("config.url"), placed at the key's
// line (else the nearest enclosing key's). Values that came from ${NAME}
// are replaced by the reference in msg.
func (t *Table) ErrorAt(key, msg string) *Error {
	full := t.path
	if key != "" {
		full += "." + key
	}
	return &Error{File: t.doc.file, Line: t.doc.line(full), Key: full, Msg: t.doc.redact(msg)}
}

// EnvRefs returns NAME=value for every ${NAME} referenced by a value of
// the table (at any depth), sorted by name.
func (t *Table) EnvRefs() []string { return t.doc.envRefsUnder(t.path) }

func (t *Table) take(key string) (any, bool) {
	if !slices.Contains(t.asked, key) {
		t.asked = append(t.asked, key)
	}
	v, ok := t.m[key]
	if ok {
		t.used[key] = true
	}
	return v, ok
}

// TypeName names the TOML type of a decoded value for messages: "a
// string", "an integer", "a table"...
func TypeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	case time.Time, toml.LocalDate, toml.LocalDateTime, toml.LocalTime:
		return "a date/time"
	}
	return fmt.Sprintf("%T", v)
}

func (t *Table) wrongType(key string, v any, want string) {
	t.Errorf(key, "want %s, got %s", want, TypeName(v))
}

// String sets *dst to key's string value when present.
func (t *Table) String(key string, dst *string) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(key, v, "a string")
		return
	}
	*dst = s
}

// OneOf is String restricted to the allowed values.
func (t *Table) OneOf(key string, dst *string, allowed ...string) {
	s := *dst
	t.String(key, &s)
	if t.Has(key) && !slices.Contains(allowed, s) {
		if _, ok := t.m[key].(string); ok {
			t.Errorf(key, "unknown value %q (want one of: %s)", s, strings.Join(allowed, ", "))
		}
		return
	}
	*dst = s
}

// Bool sets *dst to key's boolean value when present.
func (t *Table) Bool(key string, dst *bool) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	b, ok := v.(bool)
	if !ok {
		t.wrongType(key, v, "a boolean")
		return
	}
	*dst = b
}

// Int sets *dst to key's integer value when present and within [lo, hi].
func (t *Table) Int(key string, dst *int, lo, hi int) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	n, ok := v.(int64)
	if !ok {
		t.wrongType(key, v, "an integer")
		return
	}
	if n < int64(lo) || n > int64(hi) {
		t.Errorf(key, "%d is out of range (want %d to %d)", n, lo, hi)
		return
	}
	*dst = int(n)
}

// Uint64 sets *dst to key's non-negative integer value when present.
func (t *Table) Uint64(key string, dst *uint64) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	n, ok := v.(int64)
	if !ok {
		t.wrongType(key, v, "an integer")
		return
	}
	if n < 0 {
		t.Errorf(key, "%d: must not be negative", n)
		return
	}
	*dst = uint64(n)
}

// Duration sets *dst to key's duration ("500us", "10ms", "1s") when present;
// it must be positive.
func (t *Table) Duration(key string, dst *time.Duration) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	s, ok := v.(string)
	if !ok {
		t.wrongType(key, v, `a duration string such as "500ms"`)
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		if durationSyntax.MatchString(s) {
			t.Errorf(key, "%q is out of range (at most %v)", s, time.Duration(math.MaxInt64))
			return
		}
		t.Errorf(key, "%q is not a duration (want e.g. \"500us\", \"10ms\", \"1s\")", s)
		return
	}
	if d <= 0 {
		t.Errorf(key, "%q: must be positive", s)
		return
	}
	*dst = d
}

// durationSyntax matches what time.ParseDuration reads, whatever the
// magnitude: a string it matches but ParseDuration refuses is out of range.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// Strings sets *dst to key's array of strings when present.
func (t *Table) Strings(key string, dst *[]string) {
	v, ok := t.take(key)
	if !ok {
		return
	}
	arr, ok := v.([]any)
	if !ok {
		t.wrongType(key, v, "an array of strings")
		return
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			k := key + "[" + strconv.Itoa(i) + "]"
			t.Errorf(k, "want a string, got %s", TypeName(e))
			return
		}
		out = append(out, s)
	}
	*dst = out
}

// StringMap returns every key of the table as a string map; non-string
// values are errors. All keys count as taken.
func (t *Table) StringMap() map[string]string {
	out := make(map[string]string, len(t.m))
	for _, k := range slices.Sorted(maps.Keys(t.m)) {
		var s string
		t.String(k, &s)
		out[k] = s
	}
	return out
}

// Sub returns the sub-table at key (an empty table when absent).
func (t *Table) Sub(key string) *Table {
	v, ok := t.take(key)
	if !ok {
		return newTable(t.doc, t.Key(key), nil)
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.wrongType(key, v, "a table")
		return newTable(t.doc, t.Key(key), nil)
	}
	return newTable(t.doc, t.Key(key), m)
}

// Raw returns the table's values as decoded (strings with ${ENV}
// expanded). The map belongs to the config: do not modify it.
func (t *Table) Raw() map[string]any { return t.m }

// Written returns a copy of the table's values as written: each string
// that referenced a ${NAME} holds the reference again instead of the
// value. What tells one block from another without the environment's
// values (a rotated secret).
func (t *Table) Written() map[string]any {
	w, _ := t.doc.unexpand(t.path, t.m).(map[string]any)
	return w
}

// unexpand returns a copy of v (at key path key) with the strings that
// referenced a ${NAME} as written.
func (d *document) unexpand(key string, v any) any {
	switch x := v.(type) {
	case string:
		if w, ok := d.written[key]; ok {
			return w
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = d.unexpand(join(key, k), e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = d.unexpand(key+"["+strconv.Itoa(i)+"]", e)
		}
		return out
	}
	return v
}

// Finish reports every key no getter took as unknown, naming the keys the
// getters asked for.
func (t *Table) Finish() {
	for _, k := range slices.Sorted(maps.Keys(t.m)) {
		if t.used[k] {
			continue
		}
		msg := "unknown key"
		if len(t.asked) > 0 {
			msg += " (known: " + strings.Join(t.asked, ", ") + ")"
		}
		t.Errorf(k, "%s", msg)
	}
}

// Decode parses a TOML document: a UTF-8 byte-order mark is skipped and
// ${NAME} in every string is replaced by lookupEnv(NAME) (nil means
// os.LookupEnv). It returns the document's root table; file names the
// document in errors. A syntax error is returned as one *Error; problems
// found while expanding (an undefined variable) are recorded in the
// table (see Table.Err).
func Decode(file string, data []byte, lookupEnv func(string) (string, bool)) (*Table, error) {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	doc, tree, err := parseDocument(file, data)
	if err != nil {
		return nil, err
	}
	doc.expandEnv("", tree, lookupEnv)
	return newTable(doc, "", tree), nil
}
