package redisrelay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/transport/redisrelay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T) *goredis.Client {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis at %s is unreachable: %v", addr, err)
		}
		t.Skipf("redis at %s is unreachable: %v", addr, err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestPublishReachesOtherProcess(t *testing.T) {
	t.Parallel()
	rdb := client(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "relaytest:" + hex.EncodeToString(b)
	ctx := context.Background()
	a, err := redisrelay.New(ctx, redisrelay.Config{Client: rdb, Prefix: prefix})
	require.NoError(t, err)
	defer a.Close()
	other := goredis.NewClient(rdb.Options())
	defer other.Close()
	bRelay, err := redisrelay.New(ctx, redisrelay.Config{Client: other, Prefix: prefix})
	require.NoError(t, err)
	defer bRelay.Close()

	evs, stop, err := bRelay.Subscribe(ctx, "r1")
	require.NoError(t, err)
	evs2, stop2, err := bRelay.Subscribe(ctx, "r1")
	require.NoError(t, err)
	for i := int64(1); i <= 100; i++ {
		a.Publish("r1", i, "node_delta", []byte(`{"seq":1}`))
	}
	a.Publish("r2", 1, "run_started", []byte(`{}`)) // another run: not delivered
	for want := int64(1); want <= 100; want++ {
		select {
		case ev := <-evs:
			require.Equal(t, want, ev.Seq, "in publish order")
			require.Equal(t, "node_delta", ev.Type)
			require.JSONEq(t, `{"seq":1}`, string(ev.Envelope))
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d did not arrive", want)
		}
	}
	stop()
	stop() // idempotent
	_, open := <-evs
	require.False(t, open)
	select {
	case ev := <-evs2:
		require.EqualValues(t, 1, ev.Seq, "each follower gets the events")
	case <-time.After(5 * time.Second):
		t.Fatal("second follower got nothing")
	}
	stop2()
}
