// Command apicount counts the exported identifiers of a Go module, the
// measure the project uses for the size of its public API.
//
// It counts exported top-level funcs, types, vars and consts, plus exported
// methods of exported types, in non-test .go files, outside internal/, cmd/,
// examples/, testdata/ and nested modules (folders with a go.mod of their
// own). Usage, from the module's root:
//
//	go run ./internal/tools/apicount            # the total
//	go run ./internal/tools/apicount -packages  # one line a package, then the total
//	go run ./internal/tools/apicount -names     # every identifier, one a line
//	go run ./internal/tools/apicount -dir path/to/module
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "the module's root folder")
	perPkg := flag.Bool("packages", false, "print the count of each package before the total")
	names := flag.Bool("names", false, "print every counted identifier (package.Name, package.Type.Method) before the total")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: apicount [-dir DIR] [-packages] [-names]")
	}
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "apicount: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	counts, ids, err := count(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
	total := 0
	pkgs := make([]string, 0, len(counts))
	for p, n := range counts {
		pkgs = append(pkgs, p)
		total += n
	}
	sort.Strings(pkgs)
	if *names {
		sort.Strings(ids)
		for _, id := range ids {
			fmt.Println(id)
		}
	}
	if *perPkg {
		for _, p := range pkgs {
			fmt.Printf("%5d  %s\n", counts[p], p)
		}
	}
	fmt.Printf("%d exported identifiers in %d packages\n", total, len(pkgs))
}

// skipped are the folder names whose trees are not public API.
var skipped = map[string]bool{"internal": true, "cmd": true, "examples": true, "testdata": true}

// count returns the number of exported identifiers per package folder
// (relative to root) of the module at root, and the identifiers themselves.
func count(root string) (map[string]int, []string, error) {
	out := map[string]int{}
	var ids []string
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			name := e.Name()
			if path != root && (skipped[name] || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a nested module
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		found, err := exportedIn(path)
		if err != nil {
			return err
		}
		n := len(found)
		for _, id := range found {
			ids = append(ids, filepath.ToSlash(rel)+"."+id)
		}
		if n > 0 || out[rel] == 0 {
			out[rel] += n
		}
		return nil
	})
	return out, ids, err
}

// exportedIn returns the exported declarations of one file (Name, or
// Type.Method). A file of package main declares no API.
func exportedIn(path string) ([]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if f.Name.Name == "main" {
		return nil, nil
	}
	var n []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				n = append(n, d.Name.Name)
			} else if recv, ok := exportedRecv(d.Recv); ok {
				n = append(n, recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						n = append(n, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, name := range s.Names {
						if name.IsExported() {
							n = append(n, name.Name)
						}
					}
				}
			}
		}
	}
	return n, nil
}

// exportedRecv returns the name of a method's receiver type (T, *T, T[P]
// or *T[P]) and whether it is exported.
func exportedRecv(recv *ast.FieldList) (string, bool) {
	if len(recv.List) == 0 {
		return "", false
	}
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	id, ok := t.(*ast.Ident)
	if !ok || !id.IsExported() {
		return "", false
	}
	return id.Name, true
}
