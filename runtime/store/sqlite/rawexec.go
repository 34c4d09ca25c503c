package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
)

// The group commit's inserts of events — a statement with eight values a
// row for every event of the commit's runs — run on the writer's driver
// connection itself rather than through database/sql. database/sql
// converts every value of every call into a new slice and binds the
// prepared statement to the transaction anew each time; at a thousand
// streaming runs that was a tenth of what the process allocated, all of
// it on the committer, the one goroutine every delta waits for. The
// driver's statements are prepared once on the connection and run inside
// the transaction that holds it (commitGated keeps the transaction's
// sql.Conn in Store.wconn while fn runs).

// rawStmts are the writer's statements prepared on its driver connection.
// Only the goroutine holding the writer uses them.
type rawStmts struct {
	conn any                    // the driver connection they were prepared on
	m    map[string]driver.Stmt // by query
	args []driver.NamedValue    // exec's buffer
}

// execHot runs q with args in tx, the writer's transaction: on the driver
// connection when commitGated holds one, else through tx.
func (s *Store) execHot(ctx context.Context, tx *sql.Tx, q string, args []any) error {
	if s.wconn == nil {
		_, err := s.ws.execIn(ctx, tx, q, args...)
		return err
	}
	return s.wconn.Raw(func(dc any) error { return s.raw.exec(ctx, dc, q, args) })
}

// exec runs q with args on dc, preparing q there the first time.
func (r *rawStmts) exec(ctx context.Context, dc any, q string, args []any) error {
	if dc != r.conn {
		// The pool has replaced the writer's connection (or this is the
		// first use): statements belong to the connection they were
		// prepared on.
		if err := r.close(); err != nil {
			return err
		}
		r.conn, r.m = dc, map[string]driver.Stmt{}
	}
	st, ok := r.m[q]
	if !ok {
		p, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("sqlite store: driver connection %T cannot prepare", dc)
		}
		var err error
		if st, err = p.PrepareContext(ctx, q); err != nil {
			return err
		}
		r.m[q] = st
	}
	ex, ok := st.(driver.StmtExecContext)
	if !ok {
		return fmt.Errorf("sqlite store: driver statement %T cannot execute", st)
	}
	nv := r.args[:0]
	defer func() {
		clear(nv) // keep no event alive
		r.args = nv[:0]
	}()
	for i, a := range args {
		v, err := driverValue(a)
		if err != nil {
			return fmt.Errorf("sqlite store: value %d: %w", i+1, err)
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	_, err := ex.ExecContext(ctx, nv)
	return err
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

// close finalizes the statements; their connection must not be in use.
func (r *rawStmts) close() error {
	var errs []error
	for _, st := range r.m {
		errs = append(errs, st.Close())
	}
	r.conn, r.m = nil, nil
	return errors.Join(errs...)
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
	return conn.Raw(func(any) error { return s.raw.close() })
}
