package idem

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxJSONDepth is the deepest nesting of arrays and objects that
// [CanonicalJSON] accepts: 1000 levels, far beyond any real request or
// message (encoding/json's own limit is 10000). A deeper document is refused
// with [ErrJSONTooDeep] as soon as the scanner reaches level 1001, so a
// hostile body costs no more than reading it. [Message.Fingerprint] and the
// HTTP middleware then fingerprint the body as raw bytes, which is still
// exact: only the tolerance for reordered keys and whitespace is lost.
const MaxJSONDepth = 1000

// ErrInvalidJSON reports a body that CanonicalJSON cannot canonicalise:
// syntax errors, trailing data, raw bytes that are not UTF-8, duplicate
// object keys (which different parsers resolve differently, so they cannot
// have one meaning) and nesting beyond [MaxJSONDepth] ([ErrJSONTooDeep]).
// It wraps [ErrInvalidInput].
var ErrInvalidJSON = fmt.Errorf("%w: invalid JSON", ErrInvalidInput)

// ErrJSONTooDeep reports a document nested deeper than [MaxJSONDepth]. It
// wraps [ErrInvalidJSON].
var ErrJSONTooDeep = fmt.Errorf("%w: nested deeper than %d arrays and objects", ErrInvalidJSON, MaxJSONDepth)

// CanonicalJSON returns data with object keys sorted (by their UTF-8 bytes),
// insignificant whitespace removed and strings re-escaped minimally. Numbers
// keep their literal text. Top-level or dotted paths listed in exclude
// ("metadata.request_id") are removed before canonicalisation, for fields
// that legitimately differ between retries; paths do not reach into arrays.
// Duplicate object keys are rejected with [ErrInvalidJSON].
//
// Strings are re-escaped the way encoding/json writes them without HTML
// escaping: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, `\u00XX` for the other
// control characters, `\u2028` and `\u2029`; everything else is literal
// UTF-8, so `"\u00e9"` and `"é"`, or `"\/"` and `"/"`, have one canonical
// form. Two inputs have the same canonical form only if they are the same
// JSON value:
//
//   - raw bytes that are not valid UTF-8 (including encoded surrogates) are
//     rejected with [ErrInvalidJSON] instead of being replaced by U+FFFD;
//   - a \u escape of a UTF-16 surrogate that is not part of a high-low pair
//     is kept as a lowercase escape (`"\uD800"` becomes `"\ud800"`), distinct
//     from every other string; it sorts, as an object key, as the code point
//     it names.
//
// Nesting deeper than [MaxJSONDepth] is rejected with [ErrJSONTooDeep]. The
// scanner is iterative: memory and time grow with len(data) (and, for
// objects whose keys arrive out of order, with sorting them), not with
// depth. CanonicalJSON is safe for concurrent use.
func CanonicalJSON(data []byte, exclude ...string) ([]byte, error) {
	var ex [][]string
	for _, e := range exclude {
		if e != "" {
			ex = append(ex, strings.Split(e, "."))
		}
	}
	// Output is about as long as the input; a large input is given its full
	// room only once its first 64 KiB have proved to be JSON (see scan).
	c := canonicaliser{data: data, out: make([]byte, 0, min(len(data), 64<<10))}
	// A pooled room gives small documents all the room they need; nothing
	// returned points into it (frames and members hold offsets only).
	room := canonRooms.Get().(*canonRoom)
	defer canonRooms.Put(room)
	c.stack, c.open, c.objs, c.members = room.stack[:0], room.open[:0], room.objs[:0], room.members[:0]
	if err := c.scan(ex); err != nil {
		return nil, err
	}
	if len(c.objs) == 0 { // every object was already in order
		return c.out, nil
	}
	return c.emit(make([]byte, 0, len(c.out)), 0, len(c.out), 0), nil
}

// canonRoom is one CanonicalJSON call's working room: a few KiB, more than
// the documents it usually serves, so it is reused (canonRooms) instead of
// allocated and cleared per call (idemhttp fingerprints every keyed
// request's body with it).
type canonRoom struct {
	stack   [8]jsonFrame
	open    [16]jsonMember
	objs    [8]jsonObject
	members [16]jsonMember
}

var canonRooms = sync.Pool{New: func() any { return new(canonRoom) }}

// canonicaliser makes two passes. scan validates data and writes every
// token in canonical form, in input order, to out; for each object whose
// keys were not in order it records where its members are. emit then copies
// out, writing those objects' members sorted. Objects already in order
// (usually all of them) are not recorded and cost nothing more.
type canonicaliser struct {
	data    []byte
	out     []byte
	stack   []jsonFrame  // open arrays and objects, innermost last
	open    []jsonMember // members of the open objects, in input order
	objs    []jsonObject // objects to reorder, and open ones, by start offset
	members []jsonMember // members of the objects to reorder, sorted
	keys    []byte       // decoded keys that were written with escapes
	// Exclude paths by level; frames hold indexes so that they are free of
	// pointers. excludes[0] is none.
	excludes [][][]string
}

// jsonFrame is an open array or object.
type jsonFrame struct {
	object  bool
	obj     int        // objects: index in objs
	open    int        // objects: index in open of the first member
	exclude int        // objects: index in excludes of the paths at this level
	n       int        // elements, or members kept, so far
	sorted  bool       // objects: kept keys strictly increasing so far
	cur     jsonMember // objects: the member being scanned
	drop    bool       // objects: cur is excluded
	// Where to roll back to when cur is excluded.
	rollOut, rollObjs, rollMembers int
}

// jsonObject is an object in objs. reorder is false for an object whose
// own keys are in order but which contains one to reorder.
type jsonObject struct {
	start, end int // offsets in out of '{' and after '}'
	next       int // index in objs of the first object after this one's members
	mFrom, mTo int // its members in members, sorted
	reorder    bool
}

// jsonMember is an object member: keyFrom and keyTo locate its decoded key
// (for sorting and exclusion) in data, or in keys if decoded; the other
// offsets locate it in out.
type jsonMember struct {
	keyFrom  int
	keyTo    int
	decoded  bool
	start    int // offset of the key's opening quote
	value    int // offset of the value, after ':'
	end      int // offset after the value
	firstObj int // len(objs) when the value began
}

func (c *canonicaliser) errorf(i int, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrInvalidJSON, fmt.Sprintf(format, args...), i)
}

func (c *canonicaliser) unexpected(i int) error {
	if i >= len(c.data) {
		return c.errorf(i, "unexpected end of input")
	}
	return c.errorf(i, "unexpected character %q", c.data[i])
}

func (c *canonicaliser) ws(i int) int {
	for i < len(c.data) {
		switch c.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// scan is the first pass: a loop over values with an explicit stack, so
// depth costs heap (bounded by MaxJSONDepth frames), never goroutine stack.
func (c *canonicaliser) scan(exclude [][]string) error {
	data := c.data
	i := c.ws(0)
	next := 0 // index in excludes of the paths for the next value, if it is an object
	if len(exclude) > 0 {
		c.excludes = [][][]string{nil, exclude}
		next = 1
	}
	for {
		// A value starts at i.
		if i >= len(data) {
			return c.unexpected(i)
		}
		if cap(c.out)-len(c.out) < 64 && cap(c.out) < len(data) {
			c.out = slices.Grow(c.out, len(data)-len(c.out))
		}
		switch b := data[i]; b {
		case '{', '[':
			if len(c.stack) == MaxJSONDepth {
				return fmt.Errorf("%w at offset %d", ErrJSONTooDeep, i)
			}
			f := jsonFrame{object: b == '{'}
			if f.object {
				f.obj, f.open, f.exclude, f.sorted = len(c.objs), len(c.open), next, true
				c.objs = append(c.objs, jsonObject{start: len(c.out)})
			}
			c.stack = append(c.stack, f)
			c.out = append(c.out, b)
			i = c.ws(i + 1)
			if i < len(data) && (data[i] == '}' && f.object || data[i] == ']' && !f.object) {
				if err := c.close(i); err != nil {
					return err
				}
				i++
				break // the empty container is a complete value
			}
			if f.object {
				var err error
				if i, next, err = c.key(i); err != nil {
					return err
				}
			} else {
				next = 0
			}
			continue
		case '"':
			var err error
			if c.out, i, _, err = c.string(c.out, i); err != nil {
				return err
			}
		case 't', 'f', 'n':
			lit := "null"
			if b == 't' {
				lit = "true"
			} else if b == 'f' {
				lit = "false"
			}
			if string(data[i:min(i+len(lit), len(data))]) != lit {
				return c.errorf(i, "invalid literal")
			}
			c.out = append(c.out, lit...)
			i += len(lit)
		default:
			j, err := c.number(i)
			if err != nil {
				return err
			}
			c.out = append(c.out, data[i:j]...)
			i = j
		}
		// A value ended at i: continue its container, close it, or finish.
		for {
			if len(c.stack) == 0 {
				if i = c.ws(i); i != len(data) {
					return c.errorf(i, "trailing data")
				}
				return nil
			}
			f := &c.stack[len(c.stack)-1]
			if f.object {
				c.endMember(f)
			}
			if i = c.ws(i); i >= len(data) {
				return c.unexpected(i)
			}
			if data[i] == ',' {
				i = c.ws(i + 1)
				if f.object {
					var err error
					if i, next, err = c.key(i); err != nil {
						return err
					}
				} else {
					c.out = append(c.out, ',')
					next = 0
				}
				break // the next element or member value starts at i
			}
			if data[i] == '}' && f.object || data[i] == ']' && !f.object {
				if err := c.close(i); err != nil {
					return err
				}
				i++
				continue // the container is a complete value of its own
			}
			return c.unexpected(i)
		}
	}
}

// key scans an object member's key and colon at i, and returns the offset
// of the value and the index in excludes of its exclude paths.
func (c *canonicaliser) key(i int) (int, int, error) {
	f := &c.stack[len(c.stack)-1]
	if i >= len(c.data) || c.data[i] != '"' {
		if i < len(c.data) {
			return 0, 0, c.errorf(i, "object key is not a string")
		}
		return 0, 0, c.unexpected(i)
	}
	f.rollOut, f.rollObjs, f.rollMembers = len(c.out), len(c.objs), len(c.members)
	if f.n > 0 {
		c.out = append(c.out, ',')
	}
	start := len(c.out)
	out, j, escaped, err := c.string(c.out, i)
	if err != nil {
		return 0, 0, err
	}
	c.out = out
	m := jsonMember{keyFrom: i + 1, keyTo: j - 1, decoded: escaped, start: start}
	if escaped {
		m.keyFrom = len(c.keys)
		c.keys = appendDecoded(c.keys, c.out[start+1:len(c.out)-1])
		m.keyTo = len(c.keys)
	}
	f.drop = false
	sub := 0
	if f.exclude > 0 {
		key := c.keyOf(&m)
		var paths [][]string
		for _, e := range c.excludes[f.exclude] {
			if e[0] != string(key) {
				continue
			}
			if len(e) == 1 {
				f.drop = true
			} else {
				paths = append(paths, e[1:])
			}
		}
		if len(paths) > 0 {
			sub = len(c.excludes)
			c.excludes = append(c.excludes, paths)
		}
	}
	if j = c.ws(j); j >= len(c.data) || c.data[j] != ':' {
		return 0, 0, c.unexpected(j)
	}
	c.out = append(c.out, ':')
	m.value, m.firstObj = len(c.out), len(c.objs)
	f.cur = m
	return c.ws(j + 1), sub, nil
}

func (c *canonicaliser) keyOf(m *jsonMember) []byte {
	if m.decoded {
		return c.keys[m.keyFrom:m.keyTo]
	}
	return c.data[m.keyFrom:m.keyTo]
}

// endMember records the member just scanned, or rolls it back if excluded.
func (c *canonicaliser) endMember(f *jsonFrame) {
	if f.drop {
		c.out, c.objs, c.members = c.out[:f.rollOut], c.objs[:f.rollObjs], c.members[:f.rollMembers]
		return
	}
	f.cur.end = len(c.out)
	if f.n > 0 && bytes.Compare(c.keyOf(&c.open[len(c.open)-1]), c.keyOf(&f.cur)) >= 0 {
		f.sorted = false
	}
	c.open = append(c.open, f.cur)
	f.n++
}

// close ends the innermost container, whose closing bracket is at i.
func (c *canonicaliser) close(i int) error {
	f := &c.stack[len(c.stack)-1]
	if f.object {
		c.out = append(c.out, '}')
		ms := c.open[f.open:]
		switch {
		case f.sorted && len(c.objs) == f.obj+1:
			c.objs = c.objs[:f.obj] // in order, nothing inside to reorder
		case f.sorted:
			// In order itself; emit steps over it to the objects inside.
		default:
			slices.SortFunc(ms, func(a, b jsonMember) int { return bytes.Compare(c.keyOf(&a), c.keyOf(&b)) })
			for k := 1; k < len(ms); k++ {
				if key := c.keyOf(&ms[k]); bytes.Equal(c.keyOf(&ms[k-1]), key) {
					return c.errorf(i, "duplicate key %q", key)
				}
			}
			o := &c.objs[f.obj]
			o.end, o.next, o.reorder = len(c.out), len(c.objs), true
			o.mFrom = len(c.members)
			c.members = append(c.members, ms...)
			o.mTo = len(c.members)
		}
		c.open = c.open[:f.open]
	} else {
		c.out = append(c.out, ']')
	}
	c.stack = c.stack[:len(c.stack)-1]
	return nil
}

// emit appends out[pos:end] to dst, writing the objects to reorder in it,
// the first of which is objs[k] or later, with their members sorted. Its
// recursion is bounded by MaxJSONDepth.
func (c *canonicaliser) emit(dst []byte, pos, end, k int) []byte {
	for k < len(c.objs) && c.objs[k].start < end {
		o := &c.objs[k]
		if !o.reorder {
			k++
			continue
		}
		dst = append(dst, c.out[pos:o.start]...)
		dst = append(dst, '{')
		for n, m := range c.members[o.mFrom:o.mTo] {
			if n > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, c.out[m.start:m.value]...)
			dst = c.emit(dst, m.value, m.end, m.firstObj)
		}
		dst = append(dst, '}')
		pos, k = o.end, o.next
	}
	return append(dst, c.out[pos:end]...)
}

// number scans a number at i and returns the offset after it.
func (c *canonicaliser) number(i int) (int, error) {
	data := c.data
	j := i
	if j < len(data) && data[j] == '-' {
		j++
	}
	digits := func() bool {
		k := j
		for j < len(data) && '0' <= data[j] && data[j] <= '9' {
			j++
		}
		return j > k
	}
	switch {
	case j < len(data) && data[j] == '0':
		j++
	case j < len(data) && '1' <= data[j] && data[j] <= '9':
		digits()
	default:
		return 0, c.unexpected(j)
	}
	if j < len(data) && data[j] == '.' {
		j++
		if !digits() {
			return 0, c.unexpected(j)
		}
	}
	if j < len(data) && (data[j] == 'e' || data[j] == 'E') {
		j++
		if j < len(data) && (data[j] == '+' || data[j] == '-') {
			j++
		}
		if !digits() {
			return 0, c.unexpected(j)
		}
	}
	return j, nil
}

const hexDigits = "0123456789abcdef"

// string scans the string whose opening quote is at i, appends its
// canonical form to dst, and returns the offset after the closing quote and
// whether the input used escapes.
func (c *canonicaliser) string(dst []byte, i int) ([]byte, int, bool, error) {
	data := c.data
	dst = append(dst, '"')
	i++
	start, escaped := i, false
	for i < len(data) {
		b := data[i]
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, 0, false, c.errorf(i, "invalid UTF-8 in string")
			}
			if r == '\u2028' || r == '\u2029' {
				dst = append(dst, data[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
				start = i + size
			}
			i += size
			continue
		}
		if b >= 0x20 && b != '"' && b != '\\' {
			i++
			continue
		}
		dst = append(dst, data[start:i]...)
		if b == '"' {
			return append(dst, '"'), i + 1, escaped, nil
		}
		if b < 0x20 {
			return nil, 0, false, c.errorf(i, "control character in string")
		}
		escaped = true
		if i+1 >= len(data) {
			return nil, 0, false, c.unexpected(i + 1)
		}
		switch e := data[i+1]; e {
		case '"', '\\', 'b', 'f', 'n', 'r', 't':
			dst = append(dst, '\\', e)
			i += 2
		case '/':
			dst = append(dst, '/')
			i += 2
		case 'u':
			r, ok := hex4(data, i+2)
			if !ok {
				return nil, 0, false, c.errorf(i, "invalid \\u escape")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				if r < 0xdc00 && i+1 < len(data) && data[i] == '\\' && data[i+1] == 'u' {
					if r2, ok := hex4(data, i+2); ok && 0xdc00 <= r2 && r2 < 0xe000 {
						dst = appendRune(dst, utf16.DecodeRune(r, r2))
						i += 6
						break
					}
				}
				// A lone surrogate keeps its identity as an escape.
				dst = append(dst, '\\', 'u', 'd', hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
				break
			}
			dst = appendRune(dst, r)
		default:
			return nil, 0, false, c.errorf(i, "invalid escape")
		}
		start = i
	}
	return nil, 0, false, c.unexpected(i)
}

func hex4(data []byte, i int) (rune, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	var r rune
	for _, h := range data[i : i+4] {
		switch {
		case '0' <= h && h <= '9':
			h -= '0'
		case 'a' <= h && h <= 'f':
			h -= 'a' - 10
		case 'A' <= h && h <= 'F':
			h -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(h)
	}
	return r, true
}

// appendRune appends r (not a surrogate) in canonical form.
func appendRune(dst []byte, r rune) []byte {
	if r >= utf8.RuneSelf {
		if r == '\u2028' || r == '\u2029' {
			return append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		}
		return utf8.AppendRune(dst, r)
	}
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xF])
	}
	return append(dst, byte(r))
}

// appendDecoded appends the value of a string in canonical form (without
// its quotes) as UTF-8, with lone surrogates encoded as three bytes like
// other code points (WTF-8), so keys sort by code point.
func appendDecoded(dst, s []byte) []byte {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			dst = append(dst, s[i])
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			// Canonical \u escapes are controls, U+2028, U+2029 and
			// lone surrogates: one byte or three.
			r, _ := hex4(s, i+1)
			i += 4
			if r < 0x80 {
				dst = append(dst, byte(r))
			} else {
				dst = append(dst, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
			}
		default: // '"', '\\'
			dst = append(dst, s[i])
		}
	}
	return dst
}
