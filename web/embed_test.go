package web

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// The embedded UI is whole: index.html exists, and when the real build is
// embedded every asset it references is embedded too. Without a build it
// is the placeholder page that says how to build the UI.
func TestAssets(t *testing.T) {
	t.Parallel()
	ui := Assets()
	b, err := fs.ReadFile(ui, "index.html")
	if err != nil {
		t.Fatalf("index.html: %v", err)
	}
	page := string(b)
	if !Built() {
		if !strings.Contains(page, "make web") {
			t.Fatalf("the placeholder should say how to build the UI:\n%s", page)
		}
		return
	}
	if !strings.Contains(page, `name="chatgraph-ui"`) {
		t.Fatalf("index.html is not the chatgraph UI:\n%s", page)
	}
	refs := regexp.MustCompile(`(?:src|href)="/(assets/[^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) == 0 {
		t.Fatalf("index.html references no assets:\n%s", page)
	}
	for _, r := range refs {
		if _, err := fs.Stat(ui, r[1]); err != nil {
			t.Errorf("index.html references %s, which is not embedded: %v", r[1], err)
		}
	}
}
