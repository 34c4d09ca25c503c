package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"chatgraph/runcontrol"
	"chatgraph/runcontrol/controltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// redisAddr is the shared test Redis (REDIS_ADDR overrides).
func redisAddr() string {
	if a := os.Getenv("REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// newClient connects a client named name (so a test can find and kill its
// connections). Without Redis the test is skipped, but fails under CI=true.
func newClient(t *testing.T, name string) *goredis.Client {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: redisAddr(), ClientName: name, DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis at %s unreachable under CI: %v", redisAddr(), err)
		}
		t.Skipf("Redis at %s unreachable: %v", redisAddr(), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newPrefix returns a key prefix unique to this test and deletes its keys
// when the test ends.
func newPrefix(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "rctest:" + hex.EncodeToString(b[:])
	admin := newClient(t, "")
	t.Cleanup(func() { deleteKeys(t, admin, prefix) })
	return prefix
}

func deleteKeys(t *testing.T, c *goredis.Client, prefix string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, "{"+prefix+"}*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	require.NoError(t, iter.Err())
	if len(keys) > 0 {
		require.NoError(t, c.Del(ctx, keys...).Err())
	}
}

// newController opens a controller on its own connection; closed at the
// end of the test (before its client, cleanups run last-in first-out).
func newController(t *testing.T, client *goredis.Client, cfg Config) *Controller {
	t.Helper()
	cfg.Client = client
	c, err := New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c
}

func TestConformance(t *testing.T) {
	t.Parallel()
	controltest.Run(t, func(t *testing.T, o controltest.Options) func() runcontrol.Controller {
		prefix := newPrefix(t)
		return func() runcontrol.Controller {
			// One client per controller: two processes.
			return newController(t, newClient(t, ""), Config{Prefix: prefix, IntentTTL: o.IntentTTL})
		}
	})
}

// killClients kills the connections of the client named name (only the
// pub/sub one if typ is "pubsub"), using a separate admin connection.
// It never touches other clients of the shared server.
func killClients(t *testing.T, admin *goredis.Client, name, typ string) int {
	t.Helper()
	ctx := t.Context()
	var list string
	var err error
	if typ != "" {
		list, err = admin.Do(ctx, "CLIENT", "LIST", "TYPE", typ).Text()
	} else {
		list, err = admin.ClientList(ctx).Result()
	}
	require.NoError(t, err)
	killed := 0
	for line := range strings.SplitSeq(list, "\n") {
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["name"] != name {
			continue
		}
		require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "ID", fields["id"]).Err())
		killed++
	}
	return killed
}

func waitCause(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("run not cancelled within 10s")
		return nil
	}
}

func numSub(t *testing.T, admin *goredis.Client, channel string) int64 {
	m, err := admin.PubSubNumSub(t.Context(), channel).Result()
	require.NoError(t, err)
	return m[channel]
}

// TestReconnect kills the connections of instance A (first its pub/sub
// connection, then all of them) from a third client: runs bound on A stay
// cancellable from B, and A re-subscribes.
func TestReconnect(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	nameA := prefix + ":a"
	admin := newClient(t, "")
	a := newController(t, newClient(t, nameA), Config{Prefix: prefix})
	b := newController(t, newClient(t, ""), Config{Prefix: prefix})
	chat := runcontrol.ChatScope("c1")

	for round, typ := range []string{"pubsub", "pubsub", ""} {
		run := "r" + string(rune('1'+round))
		ctx, release, err := a.Bind(t.Context(), run, chat)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return numSub(t, admin, a.channel) == 2 }, 10*time.Second, 10*time.Millisecond,
			"both instances subscribed")
		require.Positive(t, killClients(t, admin, nameA, typ))

		// Cancel right away, while A may still be reconnecting: the
		// message may be lost; the re-subscribe poll or the periodic poll
		// applies the stored mark.
		res, err := b.Cancel(t.Context(), chat, runcontrol.ErrUserCancel)
		require.NoError(t, err)
		require.Equal(t, []string{run}, res.RunIDs)
		cause := waitCause(t, ctx)
		require.ErrorIs(t, cause, runcontrol.ErrUserCancel)
		release()
	}

	// After the reconnects, A is subscribed again and serves pub/sub.
	require.Eventually(t, func() bool { return numSub(t, admin, a.channel) == 2 }, 10*time.Second, 10*time.Millisecond)
	ctx, release, err := a.Bind(t.Context(), "r9", chat)
	require.NoError(t, err)
	defer release()
	_, err = b.Cancel(t.Context(), runcontrol.RunScope("r9"), runcontrol.ErrShutdown)
	require.NoError(t, err)
	require.ErrorIs(t, waitCause(t, ctx), runcontrol.ErrShutdown)
}

// TestPollDeliversWithoutPubSub writes a cancel mark with no PUBLISH (a
// message lost for good): the poll alone cancels the run, and Check sees
// the mark at once.
func TestPollDeliversWithoutPubSub(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	a := newController(t, client, Config{Prefix: prefix, PollInterval: 50 * time.Millisecond})
	ctx, release, err := a.Bind(t.Context(), "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, err)
	defer release()
	ctx2, release2, err := a.Bind(t.Context(), "r2")
	require.NoError(t, err)
	defer release2()

	mark := func(run string, reason error) {
		ce := &runcontrol.CancelError{Reason: reason, Scope: runcontrol.RunScope(run)}
		require.NoError(t, client.Set(t.Context(), a.base+":c:"+run, encodeCause(ce), time.Minute).Err())
	}
	mark("r1", runcontrol.ErrLeaseLost)
	require.ErrorIs(t, waitCause(t, ctx), runcontrol.ErrLeaseLost)

	// Check reads the mark itself, without waiting for the poll.
	mark("r2", runcontrol.ErrTimeout)
	require.ErrorIs(t, a.Check(t.Context(), "r2"), runcontrol.ErrTimeout)
	require.ErrorIs(t, context.Cause(ctx2), runcontrol.ErrTimeout)
}

// TestBindingsSurviveDataLoss deletes every key of the prefix (Redis lost
// its data) while a run is bound: its owner re-asserts the binding at the
// next poll, so the run is listed and cancellable again.
func TestBindingsSurviveDataLoss(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	admin := newClient(t, "")
	a := newController(t, newClient(t, ""), Config{Prefix: prefix, PollInterval: 50 * time.Millisecond})
	b := newController(t, newClient(t, ""), Config{Prefix: prefix})
	chat := runcontrol.ChatScope("c1")
	ctx, release, err := a.Bind(t.Context(), "r1", chat)
	require.NoError(t, err)
	defer release()

	deleteKeys(t, admin, prefix)
	active, err := b.Active(t.Context(), chat)
	require.NoError(t, err)
	require.Empty(t, active, "the binding is gone with the data")
	require.Eventually(t, func() bool {
		active, err := b.Active(t.Context(), chat)
		return err == nil && len(active) == 1
	}, 10*time.Second, 10*time.Millisecond, "the owner re-asserts its binding")
	res, err := b.Cancel(t.Context(), chat, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, res.RunIDs)
	require.ErrorIs(t, waitCause(t, ctx), runcontrol.ErrUserCancel)
}

// TestBindingOfDeadProcessExpires: a controller that vanishes without
// releasing (a crashed process) stops refreshing; its bindings expire
// after BindingTTL and the run id can be bound elsewhere.
func TestBindingOfDeadProcessExpires(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	b := newController(t, newClient(t, ""), Config{Prefix: prefix})
	// A dead process: its binding written by the script, never refreshed.
	err := bindScript.Run(t.Context(), client, []string{"{" + prefix + "}"},
		"r1", "dead/1", 300, time.Minute.Milliseconds(), "", "dead/", "run:r1", "chat:c1").Err()
	require.NoError(t, err)
	_, _, err = b.Bind(t.Context(), "r1")
	require.ErrorIs(t, err, runcontrol.ErrAlreadyBound)
	require.Eventually(t, func() bool {
		active, err := b.Active(t.Context(), runcontrol.ChatScope("c1"))
		return err == nil && len(active) == 0
	}, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, release, err := b.Bind(t.Context(), "r1")
		if err == nil {
			release()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
}

// deadBinding writes the binding an instance's process left when it died:
// owner token as that process made it, never refreshed nor released.
func deadBinding(t *testing.T, client *goredis.Client, prefix, instance, run string, scopes ...string) {
	t.Helper()
	owner := "gone/1"
	if instance != "" {
		owner = hex.EncodeToString([]byte(instance)) + "|" + owner
	}
	args := []any{run, owner, time.Minute.Milliseconds(), time.Minute.Milliseconds(), "", "gone/", "run:" + run}
	for _, s := range scopes {
		args = append(args, s)
	}
	require.NoError(t, bindScript.Run(t.Context(), client, []string{"{" + prefix + "}"}, args...).Err())
}

// A process restarted with the same Instance takes back at once the
// bindings its predecessor left, with the cancel marks they carry; it
// waits like anyone else for another instance's (even one whose name
// starts with its own) and never takes over its own live bindings.
func TestRestartedInstanceTakesItsBindingsBack(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	deadBinding(t, client, prefix, "web-1", "r1", "chat:c1")
	deadBinding(t, client, prefix, "web-1", "r2")
	deadBinding(t, client, prefix, "web-10", "r3")
	deadBinding(t, client, prefix, "", "r4")
	stranger := newController(t, newClient(t, ""), Config{Prefix: prefix, Instance: "web-2"})
	res, err := stranger.Cancel(t.Context(), runcontrol.RunScope("r2"), runcontrol.ErrUserCancel)
	require.NoError(t, err)
	require.Equal(t, runcontrol.StatusCancelled, res.Status, "r2 is bound (by a dead process)")

	restarted := newController(t, newClient(t, ""), Config{Prefix: prefix, Instance: "web-1"})
	ctx1, release1, err := restarted.Bind(t.Context(), "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, err, "its predecessor's binding is taken back")
	require.NoError(t, ctx1.Err())
	ctx2, release2, err := restarted.Bind(t.Context(), "r2")
	require.NoError(t, err)
	require.ErrorIs(t, waitCause(t, ctx2), runcontrol.ErrUserCancel, "a cancel sent to the predecessor still wins")
	release2()
	for _, run := range []string{"r3", "r4"} {
		_, _, err := restarted.Bind(t.Context(), run)
		require.ErrorIs(t, err, runcontrol.ErrAlreadyBound, "%s is another instance's", run)
	}
	_, _, err = stranger.Bind(t.Context(), "r1")
	require.ErrorIs(t, err, runcontrol.ErrAlreadyBound, "the restarted process holds r1 now")

	// Its own binding made by another Bind of this process is not an
	// earlier process's.
	mine := restarted.id + "/999"
	require.NoError(t, bindScript.Run(t.Context(), client, []string{restarted.base}, "r5", mine,
		time.Minute.Milliseconds(), time.Minute.Milliseconds(), "", "x/", "run:r5").Err())
	_, _, err = restarted.Bind(t.Context(), "r5")
	require.ErrorIs(t, err, runcontrol.ErrAlreadyBound)

	// A cancel of the chat reaches the run taken back.
	res, err = stranger.Cancel(t.Context(), runcontrol.ChatScope("c1"), runcontrol.ErrUserCancel)
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, res.RunIDs)
	require.ErrorIs(t, waitCause(t, ctx1), runcontrol.ErrUserCancel)
	release1()
}

func TestConfig(t *testing.T) {
	t.Parallel()
	_, err := New(t.Context(), Config{})
	require.Error(t, err)
	// Unreachable Redis: New fails instead of pretending.
	dead := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer dead.Close()
	_, err = New(t.Context(), Config{Client: dead, Prefix: "a{b}"})
	require.ErrorContains(t, err, "braces")
	_, err = New(t.Context(), Config{Client: dead})
	require.Error(t, err)
}

func TestDecodeCause(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"", "{", `{"code":"from_the_future","scope":"chat:c1"}`} {
		ce := decodeCause(raw)
		require.True(t, errors.Is(ce, runcontrol.ErrUserCancel), raw)
	}
	ce := &runcontrol.CancelError{Reason: runcontrol.ErrSuperseded, Scope: runcontrol.ChatScope("c:1"), Detail: "x\ty\nz"}
	require.Equal(t, ce, decodeCause(encodeCause(ce)))
	require.NotContains(t, encodeCause(ce), "\n")
	require.NotContains(t, encodeCause(ce), "\t")
}

func TestChatQueueConformance(t *testing.T) {
	t.Parallel()
	controltest.RunChatQueue(t, func(t *testing.T) func() (runcontrol.Controller, runcontrol.ChatQueue) {
		prefix := newPrefix(t)
		return func() (runcontrol.Controller, runcontrol.ChatQueue) {
			ctl := newController(t, newClient(t, ""), Config{Prefix: prefix})
			q, err := NewChatQueue(t.Context(), ctl)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, q.Close()) })
			return ctl, q
		}
	})
}

func newQueue(t *testing.T, ctl *Controller) *ChatQueue {
	t.Helper()
	q, err := NewChatQueue(t.Context(), ctl)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q.Close()) })
	return q
}

// TestChatQueueLostTurn: the turn of a run vanishes (its lease ran out
// while Redis was unreachable, or Redis lost it): the holder is cancelled
// with ErrLeaseLost and the queued run on the other instance takes over.
func TestChatQueueLostTurn(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	admin := newClient(t, "")
	cfg := Config{Prefix: prefix, PollInterval: 50 * time.Millisecond}
	a := newController(t, newClient(t, ""), cfg)
	b := newController(t, newClient(t, ""), cfg)
	qa, qb := newQueue(t, a), newQueue(t, b)

	ctx1, rel1, err := a.Bind(t.Context(), "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, err)
	defer rel1()
	t1, err := qa.Acquire(ctx1, "c1", "r1", runcontrol.Enqueue)
	require.NoError(t, err)
	defer t1.Release()

	ctx2, rel2, err := b.Bind(t.Context(), "r2", runcontrol.ChatScope("c1"))
	require.NoError(t, err)
	defer rel2()
	got := make(chan error, 1)
	go func() {
		t2, err := qb.Acquire(ctx2, "c1", "r2", runcontrol.Enqueue)
		if err == nil {
			defer t2.Release()
		}
		got <- err
	}()
	require.NoError(t, admin.Del(t.Context(), a.base+":qh:c1").Err())
	require.ErrorIs(t, waitCause(t, ctx1), runcontrol.ErrLeaseLost)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the queued run never got the turn")
	}
}

// TestChatQueueRunTakesItsTurnBack: the turn a run held in a process that
// died goes back to that run at once when it is recovered (a restart, or
// a takeover after its lease expired), in every strategy; any other run
// still finds the chat busy until that turn expires or is released.
func TestChatQueueRunTakesItsTurnBack(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	a := newController(t, client, Config{Prefix: prefix})
	qa := newQueue(t, a)
	for _, s := range []runcontrol.Strategy{runcontrol.Reject, runcontrol.Enqueue, runcontrol.Interrupt} {
		chat := "c-" + string(s)
		res, err := acquireScript.Run(t.Context(), client, []string{a.base}, chat, "r1", "r1/dead", "enqueue", time.Minute.Milliseconds(), time.Minute.Milliseconds()).StringSlice()
		require.NoError(t, err)
		require.Equal(t, []string{"granted"}, res, "the dead process held the turn")

		ctx2, rel2, err := a.Bind(t.Context(), "other-"+string(s))
		require.NoError(t, err)
		_, err = qa.Acquire(ctx2, chat, "other-"+string(s), runcontrol.Reject)
		require.ErrorIs(t, err, runcontrol.ErrChatBusy)
		rel2()

		ctx, rel, err := a.Bind(t.Context(), "r1")
		require.NoError(t, err)
		turnCtx, cancel := context.WithTimeout(ctx, 2*time.Second) // far below the turn's minute
		turn, err := qa.Acquire(turnCtx, chat, "r1", s)
		cancel()
		require.NoError(t, err, "%s: the run takes its own turn back", s)
		turn.Release()
		rel()
	}
}

// TestChatQueueRunTakesItsPlaceBack: a run that waited in its chat's
// line in a process that died takes its place back when it is started
// again (recovery relaunching a queued turn): a run queued after it in
// another process meanwhile stays behind it, and an interrupt started
// again supersedes only what is ahead of it (the holder), never the run
// that came after it.
func TestChatQueueRunTakesItsPlaceBack(t *testing.T) {
	t.Parallel()
	for _, s := range []runcontrol.Strategy{runcontrol.Enqueue, runcontrol.Interrupt} {
		t.Run(string(s), func(t *testing.T) {
			t.Parallel()
			prefix := newPrefix(t)
			client := newClient(t, "")
			a := newController(t, client, Config{Prefix: prefix})
			qa := newQueue(t, a)
			type got struct {
				turn *runcontrol.Turn
				err  error
			}
			acquire := func(id string, s runcontrol.Strategy) (context.Context, <-chan got) {
				ctx, rel, err := a.Bind(t.Context(), id, runcontrol.ChatScope("c1"))
				require.NoError(t, err)
				t.Cleanup(rel)
				ch := make(chan got, 1)
				go func() {
					turn, err := qa.Acquire(ctx, "c1", id, s)
					ch <- got{turn, err}
				}()
				return ctx, ch
			}
			recv := func(ch <-chan got, what string) got {
				t.Helper()
				select {
				case g := <-ch:
					return g
				case <-time.After(10 * time.Second):
					t.Fatalf("%s never got the turn", what)
					return got{}
				}
			}
			hctx, hch := acquire("holder", runcontrol.Enqueue)
			h := recv(hch, "the holder")
			require.NoError(t, h.err)
			// The dead process's waiter: its place, never renewed again.
			res, err := acquireScript.Run(t.Context(), client, []string{a.base}, "c1", "queued", "queued/dead", string(s),
				time.Minute.Milliseconds(), time.Minute.Milliseconds()).StringSlice()
			require.NoError(t, err)
			require.Equal(t, "queued", res[0])
			_, lch := acquire("later", runcontrol.Enqueue)
			waitLine := func(want ...string) {
				t.Helper()
				require.Eventually(t, func() bool {
					_, err := qa.Acquire(t.Context(), "c1", "probe", runcontrol.Reject)
					var busy *runcontrol.BusyError
					return errors.As(err, &busy) && fmt.Sprint(busy.RunIDs) == fmt.Sprint(want)
				}, 5*time.Second, 5*time.Millisecond, "the line never became %v", want)
			}
			waitLine("holder", "queued", "later")

			_, qch := acquire("queued", s) // started again, in another process
			if s == runcontrol.Interrupt {
				require.ErrorIs(t, waitCause(t, hctx), runcontrol.ErrSuperseded, "the holder, ahead of it, is superseded")
			}
			waitLine("holder", "queued", "later")
			h.turn.Release()
			q := recv(qch, "the run back in its place")
			require.NoError(t, q.err, "the run back in its place is next")
			if s == runcontrol.Interrupt {
				require.Equal(t, []string{"holder"}, q.turn.Superseded)
			}
			select {
			case l := <-lch:
				t.Fatalf("the later run overtook the one queued before it: %+v", l)
			default:
			}
			q.turn.Release()
			l := recv(lch, "the later run")
			require.NoError(t, l.err, "the later run comes after it")
			l.turn.Release()
		})
	}
}

// TestChatQueueLostTurnCancelsOnlyItsProcess: a process that finds its
// turn lost cancels its own run, never the same run id bound in another
// process — the one that recovered the run and took its turn back.
func TestChatQueueLostTurnCancelsOnlyItsProcess(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	admin := newClient(t, "")
	cfg := Config{Prefix: prefix, PollInterval: 50 * time.Millisecond}
	a := newController(t, newClient(t, ""), cfg)
	b := newController(t, newClient(t, ""), cfg)
	qa, qb := newQueue(t, a), newQueue(t, b)

	ctxA, relA, err := a.Bind(t.Context(), "r1", runcontrol.ChatScope("c1"))
	require.NoError(t, err)
	defer relA()
	ta, err := qa.Acquire(ctxA, "c1", "r1", runcontrol.Enqueue)
	require.NoError(t, err)
	defer ta.Release()

	// a stalls past its binding and turn leases: b recovers r1.
	var ctxB context.Context
	var relB func()
	for range 100 { // a's poll may write its binding back in between
		require.NoError(t, admin.Del(t.Context(), a.base+":r:r1").Err())
		if ctxB, relB, err = b.Bind(t.Context(), "r1", runcontrol.ChatScope("c1")); err == nil {
			break
		}
	}
	require.NoError(t, err)
	defer relB()
	tb, err := qb.Acquire(ctxB, "c1", "r1", runcontrol.Enqueue)
	require.NoError(t, err, "the recovered run takes its turn back")
	defer tb.Release()

	require.ErrorIs(t, waitCause(t, ctxA), runcontrol.ErrLeaseLost, "a's run is cancelled")
	time.Sleep(5 * cfg.PollInterval)
	require.NoError(t, ctxB.Err(), "b's run of the same id goes on")
}

// TestChatQueueTurnAndPlacesOutliveTheirProcess: a held turn, and a
// waiter's place, live TurnTTL past their process's last extension, not
// BindingTTL — a dead holder's run has time to be recovered and take its
// turn back, and a dead waiter's run to be started again and take its
// place back, before a run queued after them would take the turn.
func TestChatQueueTurnAndPlacesOutliveTheirProcess(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	admin := newClient(t, "")
	a := newController(t, newClient(t, ""), Config{Prefix: prefix, BindingTTL: time.Second, TurnTTL: time.Minute})
	qa := newQueue(t, a)
	ctx1, rel1, err := a.Bind(t.Context(), "r1")
	require.NoError(t, err)
	defer rel1()
	t1, err := qa.Acquire(ctx1, "c1", "r1", runcontrol.Enqueue)
	require.NoError(t, err)
	defer t1.Release()
	ctx2, rel2, err := a.Bind(t.Context(), "r2")
	require.NoError(t, err)
	defer rel2()
	waitCtx, stop := context.WithCancel(ctx2)
	defer stop()
	go func() { _, _ = qa.Acquire(waitCtx, "c1", "r2", runcontrol.Enqueue) }()
	require.Eventually(t, func() bool {
		n, err := admin.ZCard(t.Context(), a.base+":qx:c1").Result()
		return err == nil && n == 1
	}, 5*time.Second, 5*time.Millisecond, "r2 waits")
	hold, err := admin.PTTL(t.Context(), a.base+":qh:c1").Result()
	require.NoError(t, err)
	require.Greater(t, hold, 50*time.Second, "the turn: TurnTTL")
	place, err := admin.PTTL(t.Context(), a.base+":qx:c1").Result()
	require.NoError(t, err)
	require.Greater(t, place, 50*time.Second, "a waiter's place: TurnTTL")
	expiry, err := admin.ZScore(t.Context(), a.base+":qx:c1", "r2").Result()
	require.NoError(t, err)
	require.Greater(t, time.Until(time.UnixMilli(int64(expiry))), 50*time.Second, "r2's place: TurnTTL")
	c := newController(t, newClient(t, ""), Config{Prefix: newPrefix(t), BindingTTL: 2 * time.Second, TurnTTL: time.Second})
	require.Equal(t, 2*time.Second, c.tttl, "TurnTTL is at least BindingTTL")
}

// TestChatQueueDeadWaiter: a queued run whose process died stops renewing
// its place; it is dropped when its lease runs out and the next run gets
// the turn.
func TestChatQueueDeadWaiter(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	a := newController(t, client, Config{Prefix: prefix, PollInterval: 50 * time.Millisecond})
	qa := newQueue(t, a)

	ctx1, rel1, err := a.Bind(t.Context(), "r1")
	require.NoError(t, err)
	defer rel1()
	t1, err := qa.Acquire(ctx1, "c1", "r1", runcontrol.Enqueue)
	require.NoError(t, err)
	// A dead process queued "ghost" with a 300ms lease, then vanished.
	res, err := acquireScript.Run(t.Context(), client, []string{a.base}, "c1", "ghost", "ghost/x", "enqueue", 300, 300).StringSlice()
	require.NoError(t, err)
	require.Equal(t, []string{"queued"}, res)

	ctx2, rel2, err := a.Bind(t.Context(), "r2")
	require.NoError(t, err)
	defer rel2()
	got := make(chan error, 1)
	go func() {
		t2, err := qa.Acquire(ctx2, "c1", "r2", runcontrol.Enqueue)
		if err == nil {
			t2.Release()
		}
		got <- err
	}()
	t1.Release()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("a dead waiter blocked the chat")
	}
}

// TestChatQueueLeaveFreesADeadProcesssPlaces: a dead process's place in
// the line, and its held turn, would each keep the runs behind them
// waiting for a TurnTTL; Leave, for a run that will never take its turn,
// frees them at once. Leaving a run with no place changes nothing.
// Holder names the turn's holder.
func TestChatQueueLeaveFreesADeadProcesssPlaces(t *testing.T) {
	t.Parallel()
	prefix := newPrefix(t)
	client := newClient(t, "")
	a := newController(t, client, Config{Prefix: prefix, PollInterval: time.Hour, TurnTTL: time.Minute})
	qa := newQueue(t, a)
	acquire := func(run string) <-chan error {
		ctx, rel, err := a.Bind(t.Context(), run)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			defer rel()
			turn, err := qa.Acquire(ctx, "c1", run, runcontrol.Enqueue)
			if err == nil {
				turn.Release()
			}
			got <- err
		}()
		return got
	}
	granted := func(got <-chan error, what string) {
		t.Helper()
		select {
		case err := <-got:
			require.NoError(t, err, what)
		case <-time.After(5 * time.Second):
			t.Fatal(what + ": not granted")
		}
	}
	waiting := func(got <-chan error, what string) {
		t.Helper()
		select {
		case err := <-got:
			t.Fatalf("%s: granted (%v) while a dead process's place is ahead", what, err)
		case <-time.After(300 * time.Millisecond):
		}
	}

	// A dead process holds the turn (a minute) and has a run queued after
	// it (a minute): r1, queued behind both, waits.
	res, err := acquireScript.Run(t.Context(), client, []string{a.base}, "c1", "dead-holder", "dead-holder/x", "enqueue", 60000, 60000).StringSlice()
	require.NoError(t, err)
	require.Equal(t, []string{"granted"}, res)
	res, err = acquireScript.Run(t.Context(), client, []string{a.base}, "c1", "dead-waiter", "dead-waiter/x", "enqueue", 60000, 60000).StringSlice()
	require.NoError(t, err)
	require.Equal(t, []string{"queued"}, res)
	r1 := acquire("r1")
	waiting(r1, "r1 behind the dead holder")
	holder, err := qa.Holder(t.Context(), "c1")
	require.NoError(t, err)
	require.Equal(t, "dead-holder", holder)

	require.NoError(t, qa.Leave(t.Context(), "c1", "dead-holder"))
	holder, err = qa.Holder(t.Context(), "c1")
	require.NoError(t, err)
	require.Empty(t, holder, "the dead holder left; the dead waiter is first but cannot take the turn")
	waiting(r1, "r1 behind the dead waiter")
	require.NoError(t, qa.Leave(t.Context(), "c1", "dead-waiter"))
	granted(r1, "r1 once both left")

	// Leaving is for good, and a run with no place leaves nothing else.
	require.NoError(t, qa.Leave(t.Context(), "c1", "dead-waiter"))
	ctx2, rel2, err := a.Bind(t.Context(), "r2")
	require.NoError(t, err)
	defer rel2()
	t2, err := qa.Acquire(ctx2, "c1", "r2", runcontrol.Enqueue)
	require.NoError(t, err)
	require.NoError(t, qa.Leave(t.Context(), "c1", "nobody"))
	holder, err = qa.Holder(t.Context(), "c1")
	require.NoError(t, err)
	require.Equal(t, "r2", holder)
	r3 := acquire("r3")
	waiting(r3, "r3 behind r2, which holds the turn")
	t2.Release()
	granted(r3, "r3 after r2")
	require.Error(t, qa.Leave(t.Context(), "", "r3"), "a chat id is required")
	_, err = qa.Holder(t.Context(), "")
	require.Error(t, err, "a chat id is required")
}

func benchController(b *testing.B) *Controller {
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	b.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(b.Context()).Err(); err != nil {
		b.Skip("no Redis:", err)
	}
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	prefix := "rcbench:" + hex.EncodeToString(rb[:])
	c, err := New(b.Context(), Config{Client: client, Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		iter := client.Scan(context.Background(), 0, "{"+prefix+"}*", 1000).Iterator()
		for iter.Next(context.Background()) {
			client.Del(context.Background(), iter.Val())
		}
	})
	return c
}

func BenchmarkRedisBindRelease(b *testing.B) {
	c := benchController(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, release, err := c.Bind(b.Context(), strconv.Itoa(i), runcontrol.ChatScope("c"), runcontrol.RequestScope(strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}

func BenchmarkRedisCancelBound(b *testing.B) {
	c := benchController(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ctx, release, err := c.Bind(b.Context(), strconv.Itoa(i), runcontrol.ChatScope(strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Cancel(b.Context(), runcontrol.ChatScope(strconv.Itoa(i)), nil); err != nil {
			b.Fatal(err)
		}
		<-ctx.Done() // delivered through pub/sub
		release()
	}
}

// BenchmarkRedisCancelLatency: a run bound on one controller, cancelled
// through another on its own Redis connection (two processes): time from
// Cancel to the run's context being done, as p50/p99.
func BenchmarkRedisCancelLatency(b *testing.B) {
	a := benchController(b)
	client := goredis.NewClient(&goredis.Options{Addr: redisAddr()})
	b.Cleanup(func() { _ = client.Close() })
	other, err := New(b.Context(), Config{Client: client, Prefix: strings.Trim(a.base, "{}")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = other.Close() })
	var samples []time.Duration
	for i := 0; b.Loop(); i++ {
		id := "lat" + strconv.Itoa(i)
		ctx, release, err := a.Bind(b.Context(), id, runcontrol.ChatScope(id))
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := other.Cancel(b.Context(), runcontrol.ChatScope(id), nil); err != nil {
			b.Fatal(err)
		}
		<-ctx.Done()
		samples = append(samples, time.Since(start))
		release()
	}
	controltest.ReportPercentiles(b, samples)
}
