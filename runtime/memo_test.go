package runtime_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// A plan derives a memoized value once per key and gives it to every
// caller, concurrent ones included; keys of different types do not
// meet; past maxMemos (64) values it derives without keeping.
func TestPlanMemo(t *testing.T) {
	t.Parallel()
	k := newKit(t)
	e := k.engine(t, nil)
	p, err := e.Compile(newGraph("memo").node("s", "start").node("a", "step").flow("s", "a").build())
	require.NoError(t, err)

	type keyA string
	type keyB string
	var mu sync.Mutex
	derived := map[any]int{}
	derive := func(key any) func() any {
		return func() any {
			mu.Lock()
			derived[key]++
			mu.Unlock()
			return &struct{ key any }{key}
		}
	}
	var wg sync.WaitGroup
	got := make([]any, 8)
	for i := range got {
		wg.Go(func() { got[i] = p.Memo(keyA("x"), derive(keyA("x"))) })
	}
	wg.Wait()
	for _, v := range got {
		require.Same(t, got[0], v, "every caller gets the value kept")
	}
	require.Same(t, got[0], p.Memo(keyA("x"), derive(keyA("x"))))
	other := p.Memo(keyB("x"), derive(keyB("x")))
	require.NotSame(t, got[0], other, "a key of another type is another key")
	require.Equal(t, 1, derived[keyB("x")])

	for i := range 62 {
		p.Memo(keyA(fmt.Sprint(i)), derive(keyA(fmt.Sprint(i))))
	}
	// 64 kept: keyA("x"), keyB("x") and 62 more. The next is derived
	// at each call.
	over := keyA("over")
	first, second := p.Memo(over, derive(over)), p.Memo(over, derive(over))
	require.NotSame(t, first, second)
	require.Equal(t, 2, derived[over])
	require.Equal(t, 1, derived[keyA("61")])
	p.Memo(keyA("61"), derive(keyA("61")))
	require.Equal(t, 1, derived[keyA("61")], "a kept value is not derived again")
}
