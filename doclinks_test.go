package idem_test

import (
	"fmt"
	"go/ast"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestDocLinksResolve fails on any doc link in a doc comment of the module
// ([Name], [Name.Method], [pkg.Name], [pkg.Name.Method], [pkg]) that names
// nothing: go doc would show it as plain text, and a reader would look for a
// method that does not exist.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	idx := newSymbolIndex()
	checked := 0
	err := filepath.WalkDir(".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != "." && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") {
				return filepath.SkipDir
			}
			if p != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && !inWorkspace(p) {
					return filepath.SkipDir // a module outside the workspace (the bench peer)
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		links, err := fileDocLinks(p)
		if err != nil {
			return err
		}
		for _, l := range links {
			checked++
			if why := idx.resolve(filepath.Dir(p), l); why != "" {
				t.Errorf("%s: doc link [%s] does not resolve: %s", l.pos, l.text, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The module's doc comments hold hundreds of links; far fewer means
	// the scan found nothing to check.
	if checked < 100 {
		t.Fatalf("checked %d doc links, want at least 100", checked)
	}
}

// TestDocLinksCatchesAStaleLink shows the check can fail: a link to a
// method that does not exist is reported, one that does is not.
func TestDocLinksCatchesAStaleLink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := `// Package p has links.
package p

import "io"

// T does things; see [T.Do], [T.Missing], [io.Reader], [io.Nope] and [Absent].
type T struct{}

// Do does.
func (T) Do() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	links, err := fileDocLinks(filepath.Join(dir, "p.go"))
	if err != nil {
		t.Fatal(err)
	}
	idx := newSymbolIndex()
	var bad []string
	for _, l := range links {
		if idx.resolve(dir, l) != "" {
			bad = append(bad, l.text)
		}
	}
	if got, want := strings.Join(bad, " "), "T.Missing io.Nope Absent"; got != want {
		t.Fatalf("unresolved = %q, want %q (links %+v)", got, want, links)
	}
}

// docLink is one link found in a doc comment.
type docLink struct {
	pos     string
	text    string // as written between the brackets, without a leading *
	pkgName string // the package part as written ("" for the current package)
	recv    string
	name    string
}

// fileDocLinks parses one file and returns the doc links of its doc
// comments, each with the file's imports for resolving package names.
func fileDocLinks(file string) ([]docLink, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var groups []*ast.CommentGroup
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.File:
			groups = append(groups, n.Doc)
		case *ast.GenDecl:
			groups = append(groups, n.Doc)
		case *ast.FuncDecl:
			groups = append(groups, n.Doc)
		case *ast.TypeSpec:
			groups = append(groups, n.Doc)
		case *ast.ValueSpec:
			groups = append(groups, n.Doc)
		case *ast.Field:
			groups = append(groups, n.Doc)
		}
		return true
	})
	// Every bracketed identifier is taken as a link; resolve decides.
	var p comment.Parser
	var pkgNames []string
	p.LookupPackage = func(name string) (string, bool) {
		pkgNames = append(pkgNames, name)
		return "pkg:" + name, true
	}
	p.LookupSym = func(string, string) bool { return true }
	var out []docLink
	for _, g := range groups {
		if g == nil {
			continue
		}
		doc := p.Parse(g.Text())
		pos := fset.Position(g.Pos()).String()
		walkDocLinks(doc, func(l *comment.DocLink) {
			dl := docLink{pos: pos, recv: l.Recv, name: l.Name}
			if strings.HasPrefix(l.ImportPath, "pkg:") {
				dl.pkgName = strings.TrimPrefix(l.ImportPath, "pkg:")
			}
			for _, s := range []string{dl.pkgName, l.Recv, l.Name} {
				if s != "" && !token.IsIdentifier(s) && !strings.Contains(s, "/") {
					return // brackets around prose ([0, n), [--db URL]), not a link
				}
			}
			parts := []string{}
			for _, s := range []string{dl.pkgName, l.Recv, l.Name} {
				if s != "" {
					parts = append(parts, s)
				}
			}
			dl.text = strings.Join(parts, ".")
			out = append(out, dl)
		})
	}
	return out, nil
}

// walkDocLinks calls fn for every DocLink in doc.
func walkDocLinks(doc *comment.Doc, fn func(*comment.DocLink)) {
	var text func([]comment.Text)
	text = func(ts []comment.Text) {
		for _, t := range ts {
			switch t := t.(type) {
			case *comment.DocLink:
				fn(t)
			case *comment.Link:
				text(t.Text)
			}
		}
	}
	for _, b := range doc.Content {
		switch b := b.(type) {
		case *comment.Paragraph:
			text(b.Text)
		case *comment.Heading:
			text(b.Text)
		case *comment.List:
			for _, it := range b.Items {
				for _, c := range it.Content {
					if p, ok := c.(*comment.Paragraph); ok {
						text(p.Text)
					}
				}
			}
		}
	}
}

// symbolIndex knows the declarations of package folders: top-level names,
// and the methods and fields of each type.
type symbolIndex struct {
	mu    sync.Mutex
	dirs  map[string]*pkgSymbols // by folder
	byImp map[string]string      // import path -> folder ("" when not found)
}

type pkgSymbols struct {
	name    string
	imports map[string]string // package name -> import path, of all its files
	top     map[string]bool
	members map[string]map[string]bool
}

func newSymbolIndex() *symbolIndex {
	return &symbolIndex{dirs: map[string]*pkgSymbols{}, byImp: map[string]string{}}
}

// resolve returns "" when l names something, else why not.
func (x *symbolIndex) resolve(dir string, l docLink) string {
	target := dir
	cur := x.symbols(dir)
	if l.pkgName != "" && l.recv == "" && l.name == "" && cur != nil && cur.top[l.pkgName] {
		return "" // [Name] of this package, parsed as a package name
	}
	if l.pkgName != "" {
		var imports map[string]string
		if cur != nil {
			imports = cur.imports
		}
		switch imp, ok := imports[l.pkgName]; {
		case ok:
			target = x.folder(imp)
		case cur != nil && l.pkgName == cur.name:
			target = dir
		case l.recv == "" && l.name == "" && x.folder(l.pkgName) != "":
			return "" // [pkg] naming a standard library package
		case !strings.Contains(l.pkgName, "/") && x.folder(l.pkgName) != "":
			target = x.folder(l.pkgName) // a standard library package: [io.Reader]
		default:
			return fmt.Sprintf("package %q is not imported by this package", l.pkgName)
		}
		if target == "" {
			return fmt.Sprintf("package %q not found", l.pkgName)
		}
		if l.name == "" {
			return ""
		}
	}
	s := x.symbols(target)
	if s == nil {
		return "no Go files in " + target
	}
	if l.recv != "" {
		if !s.top[l.recv] {
			return fmt.Sprintf("%s has no type %s", s.name, l.recv)
		}
		if !s.members[l.recv][l.name] {
			return fmt.Sprintf("%s.%s has no method or field %s", s.name, l.recv, l.name)
		}
		return ""
	}
	if !s.top[l.name] {
		return fmt.Sprintf("package %s declares no %s", s.name, l.name)
	}
	return ""
}

// folder returns the source folder of an import path, "" if unknown.
func (x *symbolIndex) folder(imp string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if d, ok := x.byImp[imp]; ok {
		return d
	}
	d := ""
	if out, err := exec.Command("go", "list", "-f", "{{.Dir}}", imp).Output(); err == nil {
		d = strings.TrimSpace(string(out))
	}
	x.byImp[imp] = d
	return d
}

// symbols parses the non-test files of dir (cached).
func (x *symbolIndex) symbols(dir string) *pkgSymbols {
	x.mu.Lock()
	defer x.mu.Unlock()
	if s, ok := x.dirs[dir]; ok {
		return s
	}
	var s *pkgSymbols
	entries, _ := os.ReadDir(dir)
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		if s == nil {
			s = &pkgSymbols{name: f.Name.Name, imports: map[string]string{}, top: map[string]bool{}, members: map[string]map[string]bool{}}
		}
		addDecls(s, f)
	}
	x.dirs[dir] = s
	return s
}

func addDecls(s *pkgSymbols, f *ast.File) {
	for _, is := range f.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		name := path.Base(p)
		if strings.HasPrefix(name, "v") && strings.Trim(name[1:], "0123456789") == "" && strings.Contains(p, "/") {
			name = path.Base(path.Dir(p)) // .../pgx/v5 is package pgx
		}
		if is.Name != nil {
			name = is.Name.Name
		}
		s.imports[name] = p
	}
	member := func(typ, name string) {
		if s.members[typ] == nil {
			s.members[typ] = map[string]bool{}
		}
		s.members[typ][name] = true
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				s.top[d.Name.Name] = true
				continue
			}
			member(recvName(d.Recv.List[0].Type), d.Name.Name)
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					s.top[sp.Name.Name] = true
					switch t := sp.Type.(type) {
					case *ast.StructType:
						for _, fl := range t.Fields.List {
							for _, n := range fl.Names {
								member(sp.Name.Name, n.Name)
							}
							if len(fl.Names) == 0 { // embedded: its name is a field
								member(sp.Name.Name, recvName(fl.Type))
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							for _, n := range m.Names {
								member(sp.Name.Name, n.Name)
							}
						}
					}
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						s.top[n.Name] = true
					}
				}
			}
		}
	}
}

// recvName is the type name of a receiver or embedded field expression.
func recvName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// inWorkspace reports whether dir is one of go.work's modules: their doc
// links are checked here too (go list resolves their imports in the
// workspace).
func inWorkspace(dir string) bool {
	raw, err := os.ReadFile("go.work")
	if err != nil {
		return false
	}
	want := "./" + filepath.ToSlash(dir)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.TrimSpace(line) == want {
			return true
		}
	}
	return false
}
