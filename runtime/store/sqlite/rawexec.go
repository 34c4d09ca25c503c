package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
)

// The group commit's inserts (its page of the event tail, its chunks and
// checkpoints) and the one-row queries
// every commit runs run on the writer's driver connection itself rather
// than through database/sql. database/sql converts every value of every
// call into a new slice and binds the prepared statement to the
// transaction anew each time, and each query in a transaction starts a
// goroutine that waits for the transaction's context; at a thousand
// streaming runs the inserts alone were a tenth of what the process
// allocated, all of it on the committer, the one goroutine every delta
// waits for. The driver's statements are prepared once on the connection
// and run inside the transaction that holds it (commitGated keeps the
// transaction's sql.Conn in Store.wconn while fn runs).

// rawStmts are the writer's statements prepared on its driver connection.
// Only the goroutine holding the writer uses them.
type rawStmts struct {
	conn any                    // the driver connection they were prepared on
	m    map[string]driver.Stmt // by query
	args []driver.NamedValue    // exec's buffer
}

// errNoWriter: a hot statement outside commitGated's transaction.
var errNoWriter = errors.New("sqlite store: a write statement outside the writer's transaction")

// execHot runs q with args in the writer's transaction (commitGated's),
// on its driver connection.
func (s *Store) execHot(ctx context.Context, q string, args []any) error {
	if s.wconn == nil {
		return errNoWriter
	}
	return s.wconn.Raw(func(dc any) error { return s.raw.exec(ctx, dc, q, args) })
}

// execHotRows is execHot reporting the rows q changed.
func (s *Store) execHotRows(ctx context.Context, q string, args []any) (int64, error) {
	if s.wconn == nil {
		return 0, errNoWriter
	}
	var n int64
	err := s.wconn.Raw(func(dc any) error {
		res, err := s.raw.execResult(ctx, dc, q, args)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// queryRowHot runs q, a query of one row, with args in the writer's
// transaction (commitGated's), on its driver connection. Its scanner
// scans integers and text.
func (s *Store) queryRowHot(ctx context.Context, q string, args ...any) scanner {
	if s.wconn == nil {
		return errRow{errNoWriter}
	}
	var row rawRow
	row.err = s.wconn.Raw(func(dc any) error {
		var err error
		row.vals, err = s.raw.queryRow(ctx, dc, q, args)
		return err
	})
	return row
}

// exec runs q with args on dc, preparing q there the first time.
func (r *rawStmts) exec(ctx context.Context, dc any, q string, args []any) error {
	_, err := r.execResult(ctx, dc, q, args)
	return err
}

// execResult is exec returning the statement's result.
func (r *rawStmts) execResult(ctx context.Context, dc any, q string, args []any) (driver.Result, error) {
	st, nv, err := r.bind(ctx, dc, q, args)
	if err != nil {
		return nil, err
	}
	defer r.unbind(nv)
	ex, ok := st.(driver.StmtExecContext)
	if !ok {
		return nil, fmt.Errorf("sqlite store: driver statement %T cannot execute", st)
	}
	return ex.ExecContext(ctx, nv)
}

// queryRow runs q with args on dc and returns its first row's values
// (sql.ErrNoRows when it has none).
func (r *rawStmts) queryRow(ctx context.Context, dc any, q string, args []any) ([]driver.Value, error) {
	st, nv, err := r.bind(ctx, dc, q, args)
	if err != nil {
		return nil, err
	}
	defer r.unbind(nv)
	qc, ok := st.(driver.StmtQueryContext)
	if !ok {
		return nil, fmt.Errorf("sqlite store: driver statement %T cannot query", st)
	}
	rows, err := qc.QueryContext(ctx, nv)
	if err != nil {
		return nil, err
	}
	vals := make([]driver.Value, len(rows.Columns()))
	err = rows.Next(vals)
	if errors.Is(err, io.EOF) {
		err = sql.ErrNoRows
	}
	return vals, errors.Join(err, rows.Close())
}

// bind returns q's statement on dc, prepared there the first time, and
// args as its values (in r.args, until unbind).
func (r *rawStmts) bind(ctx context.Context, dc any, q string, args []any) (driver.Stmt, []driver.NamedValue, error) {
	if dc != r.conn {
		// The pool has replaced the writer's connection (or this is the
		// first use): statements belong to the connection they were
		// prepared on.
		if err := r.release(); err != nil {
			return nil, nil, err
		}
		r.conn, r.m = dc, map[string]driver.Stmt{}
	}
	st, ok := r.m[q]
	if !ok {
		p, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return nil, nil, fmt.Errorf("sqlite store: driver connection %T cannot prepare", dc)
		}
		var err error
		if st, err = p.PrepareContext(ctx, q); err != nil {
			return nil, nil, err
		}
		r.m[q] = st
	}
	nv := r.args[:0]
	for i, a := range args {
		v, err := driverValue(a)
		if err != nil {
			r.unbind(nv)
			return nil, nil, fmt.Errorf("sqlite store: value %d: %w", i+1, err)
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return st, nv, nil
}

// unbind takes back bind's buffer, holding no value.
func (r *rawStmts) unbind(nv []driver.NamedValue) {
	clear(nv) // keep no event alive
	r.args = nv[:0]
}

// rawRow is a row queryRowHot read on the driver connection.
type rawRow struct {
	vals []driver.Value
	err  error
}

// Scan scans the row's values into dest: *int64 (from an integer) and
// *string (from text); anything else, or a NULL, is an error, as
// database/sql's Scan into those types would make it.
func (r rawRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sqlite store: %d destinations for %d columns", len(dest), len(r.vals))
	}
	for i, v := range r.vals {
		ok := false
		switch d := dest[i].(type) {
		case *int64:
			*d, ok = v.(int64)
		case *string:
			switch x := v.(type) {
			case string:
				*d, ok = x, true
			case []byte:
				*d, ok = string(x), true
			}
		}
		if !ok {
			return fmt.Errorf("sqlite store: column %d: cannot scan %T into %T", i+1, v, dest[i])
		}
	}
	return nil
}

// driverValue is v as a driver.Value: the store's own values are those
// already (int64, string, []byte, nil); anything else is converted as
// database/sql would.
func driverValue(v any) (driver.Value, error) {
	switch v.(type) {
	case int64, string, []byte, nil:
		return v, nil
	}
	return driver.DefaultParameterConverter.ConvertValue(v)
}

// close finalizes the statements; their connection must be open and not
// in use.
func (r *rawStmts) close() error {
	var errs []error
	for _, st := range r.m {
		errs = append(errs, st.Close())
	}
	r.conn, r.m = nil, nil
	return errors.Join(errs...)
}

// release gives up the statements: it finalizes them when their
// connection is usable, and otherwise only forgets them. The pool closes
// a connection it finds unusable (driver.Validator: closed, or a
// statement on it interrupted, as a cancelled context does) or that
// failed with driver.ErrBadConn; closing it made its statements unusable,
// and finalizing them after would use its freed state (it crashed the
// process). releaseUnusable finalizes them first where the store sees
// that coming; a connection closed without that (an ErrBadConn) keeps
// SQLite's handle until the process ends.
func (r *rawStmts) release() error {
	if r.conn != nil && !usable(r.conn) {
		r.conn, r.m = nil, nil
		return nil
	}
	return r.close()
}

// usable reports whether dc, a driver connection, is one the pool keeps
// (driver.Validator); one that cannot tell is taken to be.
func usable(dc any) bool {
	v, ok := dc.(driver.Validator)
	return !ok || v.IsValid()
}

// releaseUnusable finalizes the writer's driver statements when its
// connection, about to go back to the pool, is one the pool will close
// (a statement on it was interrupted): now, while it is open. (conn is
// the writer's, its transaction ended.)
func (s *Store) releaseUnusable(conn *sql.Conn) {
	if len(s.raw.m) == 0 {
		return
	}
	_ = conn.Raw(func(dc any) error {
		if dc == s.raw.conn && !usable(dc) {
			return s.raw.close()
		}
		return nil
	})
}

// closeRaw finalizes the writer's driver statements on its connection,
// before the connection closes (a connection with statements left open
// would stay open).
func (s *Store) closeRaw() error {
	if len(s.raw.m) == 0 {
		return nil
	}
	conn, err := s.w.Conn(context.Background())
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		if dc == s.raw.conn {
			return s.raw.close() // open: the pool's, held here
		}
		return s.raw.release()
	})
}
