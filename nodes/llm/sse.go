package llm

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// errStreamDone is returned by an SSE handler to stop reading.
var errStreamDone = errors.New("stream done")

// readSSE decodes a text/event-stream body and calls fn with the data of
// each event (several data lines joined by "\n"). Comments, event names
// and ids are ignored. A line longer than maxLine bytes is an error. An
// event not closed by a blank line before EOF is still delivered. fn may
// return errStreamDone to stop without error.
func readSSE(r io.Reader, maxLine int, fn func(data []byte) error) error {
	br := bufio.NewReaderSize(r, 4096)
	var data []byte
	has := false
	dispatch := func() error {
		if !has {
			return nil
		}
		d := data
		data, has = data[:0], false
		return fn(d)
	}
	var line []byte
	for {
		line = line[:0]
		var err error
		for {
			var frag []byte
			frag, err = br.ReadSlice('\n')
			if len(line)+len(frag) > maxLine {
				return fmt.Errorf("stream line longer than %d bytes", maxLine)
			}
			line = append(line, frag...)
			if !errors.Is(err, bufio.ErrBufferFull) {
				break
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		eof := err != nil
		l := bytes.TrimRight(line, "\r\n")
		switch {
		case len(l) == 0:
			if !eof || len(line) > 0 {
				if e := dispatch(); e != nil {
					return done(e)
				}
			}
		case l[0] == ':':
			// comment / keep-alive
		default:
			field, value, _ := bytes.Cut(l, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(field) == "data" {
				if has {
					data = append(data, '\n')
				}
				data = append(data, value...)
				has = true
			}
		}
		if eof {
			return done(dispatch())
		}
	}
}

func done(err error) error {
	if errors.Is(err, errStreamDone) {
		return nil
	}
	return err
}
