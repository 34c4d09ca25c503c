// Package rowjson encodes the JSON columns the durable run stores share:
// the parts of a run record kept as JSON (attributes, entry ids, input,
// options, interrupts, answers) and generic JSON values. One codec, so the
// SQLite and Postgres stores cannot drift apart.
package rowjson
