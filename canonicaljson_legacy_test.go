package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
)

// legacyCanonicalJSON is CanonicalJSON as it was before the iterative
// scanner (built on encoding/json's Decoder.Token, recursive, no depth
// limit, invalid UTF-8 and lone surrogates collapsed to U+FFFD). Fingerprints
// computed by it are stored in databases, so FuzzCanonicalJSON checks that
// the scanner gives the same bytes wherever the old code was right, and
// BenchmarkCanonicalJSON compares the two. Errors are reported as a bare
// non-nil error: only success and output are compared.
func legacyCanonicalJSON(data []byte, exclude ...string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out bytes.Buffer
	out.Grow(len(data))
	var ex [][]string
	for _, e := range exclude {
		if e != "" {
			ex = append(ex, strings.Split(e, "."))
		}
	}
	if err := legacyValue(dec, &out, ex); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	return out.Bytes(), nil
}

func legacyValue(dec *json.Decoder, out *bytes.Buffer, exclude [][]string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return legacyObject(dec, out, exclude)
		case '[':
			out.WriteByte('[')
			first := true
			for dec.More() {
				if !first {
					out.WriteByte(',')
				}
				first = false
				if err := legacyValue(dec, out, nil); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			out.WriteByte(']')
			return nil
		}
		return errors.New("unexpected delimiter")
	case string:
		return legacyString(out, t)
	case json.Number:
		out.WriteString(t.String())
	case bool:
		if t {
			out.WriteString("true")
		} else {
			out.WriteString("false")
		}
	case nil:
		out.WriteString("null")
	}
	return nil
}

func legacyObject(dec *json.Decoder, out *bytes.Buffer, exclude [][]string) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := kt.(string)
		if !ok {
			return errors.New("object key is not a string")
		}
		var sub [][]string
		drop := false
		for _, e := range exclude {
			if e[0] != key {
				continue
			}
			if len(e) == 1 {
				drop = true
			} else {
				sub = append(sub, e[1:])
			}
		}
		var buf bytes.Buffer
		if err := legacyValue(dec, &buf, sub); err != nil {
			return err
		}
		for _, m := range members {
			if m.key == key {
				return errors.New("duplicate key")
			}
		}
		if !drop {
			members = append(members, member{key, buf.Bytes()})
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			out.WriteByte(',')
		}
		if err := legacyString(out, m.key); err != nil {
			return err
		}
		out.WriteByte(':')
		out.Write(m.val)
	}
	out.WriteByte('}')
	return nil
}

func legacyString(out *bytes.Buffer, s string) error {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	out.Truncate(out.Len() - 1) // Encode appends a newline
	return nil
}
