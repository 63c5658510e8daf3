package pricing

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/trellis-run/trellis/runtime/llm"
)

// File is the price table a daemon uses: the embedded default, overridden
// by the entries of a price file when one is given. The file is read again
// when its contents change (looked at, at most every recheck, when a call
// is priced); a change that does not parse is logged and the last table
// that did is kept. File is safe for concurrent use.
type File struct {
	path    string
	vendors []string
	log     *slog.Logger
	recheck time.Duration

	mu      sync.Mutex
	table   *Table
	data    []byte // the file's contents table was built from
	bad     []byte // contents last refused, so that a bad file is logged once
	gone    bool   // the file was unreadable when last read (logged once)
	checked time.Time
}

// defaultRecheck bounds how often the file is read while calls are priced.
const defaultRecheck = time.Second

// Open returns the price table of path over the default table, or the
// default alone when path is "". vendors are the vendor names the file may
// price (nil: any). A file that cannot be read or does not parse is an
// error (each problem an *Error naming its key): at start-up a daemon
// refuses it.
func Open(path string, vendors []string, log *slog.Logger) (*File, error) {
	f := &File{path: path, vendors: vendors, log: log, recheck: defaultRecheck, table: Default()}
	if path == "" {
		return f, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read the price file: " + err.Error()}
	}
	t, err := Parse(path, data, vendors)
	if err != nil {
		return nil, err
	}
	f.table, f.data, f.checked = Default().Override(t), data, time.Now()
	return f, nil
}

// Table returns the current table, reading the file again first when it
// was last read more than recheck ago.
func (f *File) Table() *Table {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.path == "" || time.Since(f.checked) < f.recheck {
		return f.table
	}
	f.checked = time.Now()
	data, err := os.ReadFile(f.path)
	if err != nil {
		if !f.gone {
			f.log.Warn("price file unreadable; keeping the last price table", "file", f.path, "err", err)
		}
		f.gone = true
		return f.table
	}
	f.gone = false
	switch {
	case bytes.Equal(data, f.data) || f.bad != nil && bytes.Equal(data, f.bad):
	default:
		t, err := Parse(f.path, data, f.vendors)
		if err != nil {
			f.log.Warn("price file changed but is refused; keeping the last price table", "file", f.path, "err", err)
			f.bad = data
			break
		}
		f.table, f.data, f.bad = Default().Override(t), data, nil
		f.log.Info("price file reloaded", "file", f.path)
	}
	return f.table
}

// Cost prices a call with the current table (Table.Cost).
func (f *File) Cost(vendor, model string, u llm.Usage) (microUSD int64, priced bool) {
	return f.Table().Cost(vendor, model, u)
}
