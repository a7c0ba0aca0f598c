package idemhttp

import (
	"bytes"
	"net/http/httptest"
	"os"
	"testing"
)

// A capture keeps the head of the body in memory and spills the rest to a
// file of mode 0600 that has no name in the spill directory; the whole
// body reads back and is sent in order.
func TestCaptureSpillsPrivately(t *testing.T) {
	dir := t.TempDir()
	m := &Middleware[any]{cfg: Config{MaxResponseMemory: 100, SpillDir: dir}}
	rec := httptest.NewRecorder()
	c := m.newCapture(rec)
	defer c.close()
	want := bytes.Repeat([]byte("<html>spilled "), 200) // 2800 bytes, one write across the memory limit
	if n, err := c.Write(want[:2000]); n != 2000 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if n, err := c.Write(want[2000:]); n != 800 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if c.file == nil || c.mem.Len() != sniffLen {
		t.Fatalf("file %v, %d bytes in memory; want a spill after %d", c.file, c.mem.Len(), sniffLen)
	}
	fi, err := c.file.Stat()
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("spill file mode %v (%v), want 0600", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("spill directory lists %d entries, want none (unlinked)", len(ents))
	}
	c.finish()
	if ct := c.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("sniffed Content-Type %q", ct)
	}
	if b, ok, err := c.body(1 << 20); !ok || err != nil || !bytes.Equal(b, want) {
		t.Fatalf("body: %d bytes, ok %v, %v", len(b), ok, err)
	}
	if _, ok, _ := c.body(len(want) - 1); ok {
		t.Fatal("body above the limit was returned")
	}
	c.send()
	if !bytes.Equal(rec.Body.Bytes(), want) {
		t.Fatalf("sent %d bytes, want %d in order", rec.Body.Len(), len(want))
	}
	c.close()
	if c.file != nil {
		t.Fatal("close kept the file")
	}
}
