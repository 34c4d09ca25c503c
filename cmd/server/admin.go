package main

import (
	"chatgraph/chat"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"chatgraph/runtime"
)

// takeFlag removes --name VALUE or --name=VALUE from args and returns its
// value; the rest goes to the common store flags.
func takeFlag(args []string, name string) (string, []string) {
	var rest []string
	val := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--"+name || a == "-"+name:
			if i+1 < len(args) {
				val = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--"+name+"=") || strings.HasPrefix(a, "-"+name+"="):
			val = a[strings.Index(a, "=")+1:]
		default:
			rest = append(rest, a)
		}
	}
	return val, rest
}

// inspector opens the run store named by the common flags.
func inspector(ctx context.Context, env Env, name string, args []string) (runtime.Store, runtime.Inspector, []string, func(), error) {
	c, fs, err := parseConfig(name, env, args)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	st, err := openStores(ctx, c, newLogger(c, env.Stderr))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	in, ok := st.runs.(runtime.Inspector)
	if !ok {
		st.close()
		return nil, nil, nil, nil, errors.New("the run store cannot list runs")
	}
	return st.runs, in, fs.Args(), st.close, nil
}

func runsCmd(ctx context.Context, env Env, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("runs: want list, show or resume\n%s", usage)
	}
	switch args[0] {
	case "list":
		return runsList(ctx, env, args[1:])
	case "show":
		return runsShow(ctx, env, args[1:])
	case "resume":
		return runsResume(ctx, env, args[1:])
	}
	return fmt.Errorf("runs: unknown subcommand %q\n%s", args[0], usage)
}

func runsList(ctx context.Context, env Env, args []string) error {
	status, args := takeFlag(args, "status")
	chat, args := takeFlag(args, "chat")
	limit, args := takeFlag(args, "limit")
	_, in, _, closeStore, err := inspector(ctx, env, "runs list", args)
	if err != nil {
		return err
	}
	defer closeStore()
	f := runtime.RunFilter{ChatID: chat, Limit: 100}
	if limit != "" {
		if f.Limit, err = strconv.Atoi(limit); err != nil || f.Limit <= 0 {
			return fmt.Errorf("runs list: --limit must be a positive number")
		}
	}
	for _, s := range strings.Split(status, ",") {
		if s = strings.TrimSpace(s); s != "" {
			f.Status = append(f.Status, runtime.RunStatus(s))
		}
	}
	runs, err := in.ListRuns(ctx, f)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "RUN\tSTATUS\tKIND\tCHAT\tGRAPH\tEVENTS\tCREATED\tERROR")
	for _, r := range runs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s@%d\t%d\t%s\t%s\n", r.ID, r.Status, r.Kind, r.ChatID, r.GraphID, r.PlanVersion,
			r.LastSeq, r.CreatedAt.UTC().Format(time.RFC3339), oneLine(r.Error, 60))
	}
	return w.Flush()
}

func runsShow(ctx context.Context, env Env, args []string) error {
	st, _, rest, closeStore, err := inspector(ctx, env, "runs show", args)
	if err != nil {
		return err
	}
	defer closeStore()
	if len(rest) != 1 {
		return errors.New("runs show: want one RUN_ID")
	}
	rec, err := st.GetRun(ctx, rest[0])
	if err != nil {
		return err
	}
	cps, err := st.Checkpoints(ctx, rec.ID)
	if err != nil {
		return err
	}
	evs, err := st.Events(ctx, rec.ID, 0, 0)
	if err != nil {
		return err
	}
	// A node's checkpoint ids are the seqs of its transitions' events.
	ids := map[string][]string{}
	for _, ev := range evs {
		switch ev.Type {
		case runtime.EventNodeStarted, runtime.EventNodeRetrying, runtime.EventNodeCompleted, runtime.EventNodeFailed,
			runtime.EventNodeCancelled, runtime.EventNodeInterrupted, runtime.EventNodeSkipped:
			ids[ev.NodeID] = append(ids[ev.NodeID], rec.ID+"@"+strconv.FormatInt(ev.Seq, 10))
		}
	}
	fmt.Fprintf(env.Stdout, "run %s  %s  kind=%s chat=%s graph=%s@%d parent=%s events=%d\n", rec.ID, rec.Status, rec.Kind,
		rec.ChatID, rec.GraphID, rec.PlanVersion, rec.ParentID, rec.LastSeq)
	if rec.Error != "" {
		fmt.Fprintf(env.Stdout, "error: %s\n", rec.Error)
	}
	for _, in := range rec.Interrupts {
		fmt.Fprintf(env.Stdout, "pending interrupt %s at %s (%s)\n", in.ID, in.NodeID, in.Reason)
	}
	w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tSTATUS\tATTEMPT\tSTARTED\tDURATION\tREPLAYED\tERROR\tCHECKPOINTS")
	for _, cp := range cps {
		dur := ""
		if !cp.StartedAt.IsZero() && cp.Status != runtime.NodeRunning {
			dur = cp.UpdatedAt.Sub(cp.StartedAt).Round(time.Microsecond).String()
		}
		started := ""
		if !cp.StartedAt.IsZero() {
			started = cp.StartedAt.UTC().Format("15:04:05.000")
		}
		errText := cp.Error
		if cp.ErrorCode != "" {
			errText = cp.ErrorCode + ": " + errText
		}
		if cp.SkipReason != "" {
			errText = cp.SkipReason
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%v\t%s\t%s\n", cp.NodeID, cp.Status, cp.Attempt, started, dur, cp.Replayed,
			oneLine(errText, 50), strings.Join(ids[cp.NodeID], " "))
	}
	return w.Flush()
}

// runsResume continues an interrupted, cancelled or failed run through the
// server's own runner (in this process, no listener), as
// POST /api/v1/runs/{id}/resume would, and prints its events.
func runsResume(ctx context.Context, env Env, args []string) error {
	value, args := takeFlag(args, "value")
	c, fs, err := parseConfig("runs resume", env, args)
	if err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("runs resume: want one RUN_ID")
	}
	log := newLogger(c, env.Stderr)
	st, err := openStores(ctx, c, log)
	if err != nil {
		return err
	}
	defer st.close()
	reg, setup, err := registry(c, log)
	if err != nil {
		return err
	}
	defer setup.Close()
	ctl, queue, closeRedis, err := runControl(ctx, c, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	srv, err := newServer(c, st, reg, setup, ctl, queue, nil, log)
	if err != nil {
		_ = ctl.Close()
		return err
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	body := `{}`
	if value != "" {
		if !json.Valid([]byte(value)) {
			return errors.New("runs resume: --value must be JSON")
		}
		body = `{"value":` + value + `}`
	}
	req := httptest.NewRequest(http.MethodPost, "http://localhost/api/v1/runs/"+fs.Arg(0)+"/resume", strings.NewReader(body)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code >= 300 {
		b, _ := io.ReadAll(rec.Body)
		return fmt.Errorf("runs resume: %d %s", rec.Code, strings.TrimSpace(string(b)))
	}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "data: ") {
			fmt.Fprintln(env.Stdout, strings.TrimPrefix(line, "data: "))
		}
	}
	return nil
}

func gcCmd(ctx context.Context, env Env, args []string) error {
	older, args := takeFlag(args, "older-than")
	waiting, args := takeFlag(args, "interrupted-older-than")
	if older == "" {
		older = "720h"
	}
	age, err := time.ParseDuration(older)
	if err != nil || age <= 0 {
		return fmt.Errorf("gc: --older-than must be a positive duration like 720h")
	}
	_, in, _, closeStore, err := inspector(ctx, env, "gc", args)
	if err != nil {
		return err
	}
	defer closeStore()
	n, err := in.DeleteFinishedBefore(ctx, time.Now().Add(-age))
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "deleted %d finished runs older than %s\n", n, age)
	if waiting != "" {
		wage, err := time.ParseDuration(waiting)
		if err != nil || wage <= 0 {
			return fmt.Errorf("gc: --interrupted-older-than must be a positive duration like 720h")
		}
		m, err := chat.DeleteInterruptedBefore(ctx, in, time.Now().Add(-wage))
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "deleted %d runs interrupted for longer than %s\n", m, wage)
	}
	return nil
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
