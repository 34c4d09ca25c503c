package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "chatgraph"

// allowed lists, per top-level package of the module, which other
// top-level packages its non-test code may import.
var allowed = map[string][]string{
	"runtime":    {},
	"chatscope":  {"runtime", "nodes"},
	"runcontrol": {},
	"nodes":      {"runtime"},
	"chat":       {"runtime", "chatscope", "runcontrol", "nodes"},
	"transport":  {"runtime", "runcontrol", "chat", "internal", "web"},
	"cmd":        {"runtime", "chatscope", "runcontrol", "nodes", "chat", "transport", "internal", "web", "config"},
	"config":     {"nodes"},
	"internal":   {"runtime"},
	"web":        {},
}

// forbidden lists, per package path prefix, import path prefixes its
// non-test code may not use although the top-level rule allows them: the
// transport reaches stores only through the chat service and the engine
// (cmd/server picks the implementations).
var forbidden = map[string][]string{
	"transport/": {module + "/runtime/store/", module + "/chat/store/"},
	"chat/":      {module + "/runtime/store/", module + "/chat/store/"},
}

func repoRoot(t *testing.T) string {
	dir, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	return dir
}

type goFile struct {
	rel  string // path relative to the repo root
	file *ast.File
}

func parseAll(t *testing.T, root string) []goFile {
	var files []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, goFile{rel: filepath.ToSlash(rel), file: f})
		return nil
	})
	require.NoError(t, err)
	return files
}

func TestImportDirection(t *testing.T) {
	root := repoRoot(t)
	files := parseAll(t, root)
	require.NotEmpty(t, files)
	for _, f := range files {
		top := strings.SplitN(f.rel, "/", 2)[0]
		ok, known := allowed[top]
		if !known {
			continue
		}
		for _, imp := range f.file.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path != module && !strings.HasPrefix(path, module+"/") {
				continue
			}
			for prefix, bans := range forbidden {
				if !strings.HasPrefix(f.rel, prefix) || strings.HasPrefix(f.rel, "chat/store/") {
					continue
				}
				for _, ban := range bans {
					require.False(t, strings.HasPrefix(path, ban), "%s imports %s: %s may not use a store implementation", f.rel, path, prefix)
				}
			}
			target := strings.SplitN(strings.TrimPrefix(path, module+"/"), "/", 2)[0]
			if target == top {
				continue
			}
			require.Contains(t, ok, target, "%s imports %s: %s may not depend on %s", f.rel, path, top, target)
		}
	}
}

// domainWord matches string literals that name domain concepts or the
// built-in node types' handle names.
var domainWord = regexp.MustCompile(`(?i)\b(agents?|tools?|chats?|chat_start|chat_output|approvals?|llm|prompt|assistant|message|self|user)\b`)

func TestRuntimeStaysGeneric(t *testing.T) {
	root := repoRoot(t)
	var checked int
	for _, f := range parseAll(t, root) {
		if !strings.HasPrefix(f.rel, "runtime/") || strings.HasPrefix(f.rel, "runtime/store/") {
			continue
		}
		checked++
		ast.Inspect(f.file, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.Field:
				// Struct tags are JSON field names of the wire envelope, not code.
				if x.Tag != nil {
					x.Tag = nil
				}
			case *ast.BasicLit:
				if x.Kind == token.STRING {
					s, _ := strconv.Unquote(x.Value)
					require.False(t, domainWord.MatchString(s), "%s: string literal %q names a domain concept; the kernel must stay generic", f.rel, s)
				}
			}
			return true
		})
	}
	require.Greater(t, checked, 5, "runtime sources were found")
}
