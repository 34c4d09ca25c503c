package runtime_test

import (
	"context"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/require"

	"chatgraph/internal/pgtest"
	"chatgraph/runtime"
	"chatgraph/runtime/store/postgres"
	"chatgraph/runtime/store/sqlite"
)

// storeInterface is an interface of package runtime a store implements,
// as the type checker sees it: method name -> signature without
// parameter names, as reflect prints it.
type storeInterface struct {
	name    string
	methods map[string]string
}

// storeInterfaces reads package runtime's type information and returns
// Store and every optional store interface: each exported interface type
// declared in store.go or durability.go. A new optional interface is
// covered without editing this test.
func storeInterfaces(t *testing.T) (base storeInterface, optional []storeInterface) {
	t.Helper()
	// The compiler's export data of the package as it is now (go list
	// builds it, usually from the build cache).
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	require.NoError(t, err, "go list -export")
	exports := map[string]string{}
	for line := range strings.Lines(string(out)) {
		path, file, _ := strings.Cut(strings.TrimSpace(line), "=")
		exports[path] = file
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) })
	pkg, err := imp.Import("chatgraph/runtime")
	require.NoError(t, err)

	qualify := func(p *types.Package) string { return p.Name() }
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || !obj.Exported() {
			continue
		}
		iface, ok := obj.Type().Underlying().(*types.Interface)
		if !ok {
			continue
		}
		if file := filepath.Base(fset.Position(obj.Pos()).Filename); file != "store.go" && file != "durability.go" {
			continue
		}
		si := storeInterface{name: name, methods: map[string]string{}}
		for m := range iface.Methods() {
			sig := m.Type().(*types.Signature)
			bare := func(tup *types.Tuple) *types.Tuple {
				var vs []*types.Var
				for v := range tup.Variables() {
					vs = append(vs, types.NewParam(token.NoPos, nil, "", v.Type()))
				}
				return types.NewTuple(vs...)
			}
			si.methods[m.Name()] = types.TypeString(types.NewSignatureType(nil, nil, nil, bare(sig.Params()), bare(sig.Results()), sig.Variadic()), qualify)
		}
		if name == "Store" {
			base = si
			continue
		}
		optional = append(optional, si)
	}
	require.NotEmpty(t, base.methods, "runtime.Store not found in store.go")
	require.NotEmpty(t, optional, "no optional store interface found")
	return base, optional
}

// implementedBy reports whether v has every method of si with its signature.
func (si storeInterface) implementedBy(v any) bool {
	rv := reflect.ValueOf(v)
	for name, sig := range si.methods {
		m := rv.MethodByName(name)
		if !m.IsValid() || m.Type().String() != sig {
			return false
		}
	}
	return true
}

// op is the name a StoreObserver is given for a call of method.
func op(method string) string {
	var b strings.Builder
	for i, r := range method {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// bareStore has the Store methods of the store it holds and nothing else.
type bareStore struct{ runtime.Store }

func openSQLiteStore(t *testing.T) runtime.Store {
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "runs.db")})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// openPostgresStore opens a store on a fresh schema, dropped when the test
// ends. Without a reachable Postgres the test is skipped, except in CI
// (CI=true), where it fails.
func openPostgresStore(t *testing.T) runtime.Store {
	st, err := postgres.Open(t.Context(), postgres.Config{URL: pgtest.URL(), Schema: pgtest.Schema(t, "storeview"), MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// An engine with a StoreObserver sees exactly the optional interfaces its
// store implements, every one of them timed, and reports the calls it
// makes under the names of the methods it calls.
func TestStoreObserverKeepsCapabilities(t *testing.T) {
	t.Parallel()
	base, optional := storeInterfaces(t)
	for _, tc := range []struct {
		name string
		open func(t *testing.T) runtime.Store
	}{
		{"memory", func(*testing.T) runtime.Store { return newMem() }},
		{"bare", func(*testing.T) runtime.Store { return bareStore{newMem()} }},
		{"sqlite", openSQLiteStore},
		{"postgres", openPostgresStore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := tc.open(t)
			want := []string{}
			known := map[string]bool{}
			for m := range base.methods {
				known[op(m)] = true
			}
			for _, si := range optional {
				if si.implementedBy(raw) {
					want = append(want, si.name)
					for m := range si.methods {
						known[op(m)] = true
					}
				}
			}

			var mu sync.Mutex
			seen := map[string]int{}
			k := newKit(t)
			e := k.engine(t, raw, func(c *runtime.Config) {
				c.StoreObserver = func(op string, d time.Duration, err error) {
					mu.Lock()
					defer mu.Unlock()
					seen[op]++
				}
			})
			got := e.Capabilities()
			slices.Sort(got)
			slices.Sort(want)
			require.Equal(t, want, got, "the engine's capabilities are the store's")
			require.True(t, e.Store() == raw, "Store returns the store as configured")

			g := newGraph("obs").node("s", "start").node("a", "step").flow("s", "a").build()
			res, err := e.Invoke(t.Context(), runtime.RunRequest{Graph: g, Input: "x"})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			has := func(name string) bool { return slices.Contains(got, name) }
			res, err = e.Invoke(t.Context(), runtime.RunRequest{Graph: g, Input: "x",
				Options: runtime.RunOptions{Durability: runtime.DurabilityExit}})
			require.NoError(t, err)
			require.Equal(t, runtime.RunCompleted, res.Status)
			if has("Leaser") {
				n, err := e.RecoverExpired(t.Context(), runtime.RecoveryConfig{
					Prepare: func(context.Context, *runtime.RunRecord) (runtime.RecoverRequest, error) {
						return runtime.RecoverRequest{Graph: g}, nil
					}})
				require.NoError(t, err)
				require.Zero(t, n)
			}

			mu.Lock()
			defer mu.Unlock()
			for name := range seen {
				require.True(t, known[name], "op %q is no method of the store's interfaces", name)
			}
			// The calls each capability stands in for.
			var wantOps []string
			switch {
			case has("BatchFinisher") && has("RunStarter"):
				// A sync run's creation joins its first group commit; the
				// exit-mode run (no committer) created and claimed its
				// record in one call.
				wantOps = append(wantOps, "create_claimed")
			case has("RunStarter"):
				wantOps = append(wantOps, "create_claimed")
			case has("Leaser"):
				wantOps = append(wantOps, "create_run", "claim_run")
			default:
				wantOps = append(wantOps, "create_run")
			}
			if has("BatchWriter") {
				wantOps = append(wantOps, "write_batches")
			} else {
				wantOps = append(wantOps, "save_checkpoint", "append_events")
			}
			if !has("BatchFinisher") {
				wantOps = append(wantOps, "update_run")
				if has("Leaser") {
					wantOps = append(wantOps, "release_lease")
				}
			}
			if has("BulkClaimer") {
				wantOps = append(wantOps, "claim_expired")
			} else if has("Leaser") {
				wantOps = append(wantOps, "expired_runs")
			}
			for _, name := range wantOps {
				require.Positive(t, seen[name], "no %s reported; saw %v", name, seen)
			}
		})
	}
}
