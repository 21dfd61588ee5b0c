package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// fmtTime prints t in UTC to the second, or "-" for the zero time.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// isText reports whether b can be printed as it is: valid UTF-8 made of
// printable characters, newlines and tabs (no escape sequences, no
// carriage returns).
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// fmtBytes prints a short byte field (a key, a header value) on one line:
// as text when it is printable and has no newline, else as hex.
func fmtBytes(b []byte) string {
	switch {
	case b == nil:
		return "(none)"
	case len(b) == 0:
		return "(empty)"
	case isText(b) && !strings.ContainsAny(string(b), "\n\t"):
		if s := string(b); strings.TrimSpace(s) != s {
			return strconv.Quote(s) // keep the blanks visible
		}
		return string(b)
	default:
		return fmt.Sprintf("(hex, %d bytes) %s", len(b), hex.EncodeToString(b))
	}
}

// oneLine makes s safe for a table cell: control and other unprintable
// characters escaped, at most width runes (with "..." when cut).
func oneLine(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == width {
			return strings.TrimRight(b.String(), " ") + "..."
		}
		switch {
		case r == '\n' || r == '\t':
			b.WriteByte(' ')
		case r == utf8.RuneError || !unicode.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		n++
	}
	return b.String()
}

// indent prefixes every line of s with p.
func indent(s, p string) string {
	s = strings.TrimSuffix(s, "\n")
	return p + strings.ReplaceAll(s, "\n", "\n"+p) + "\n"
}

// table aligns tab-separated cells into columns, two spaces apart, with
// no trailing blanks.
type table struct {
	w   io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(w io.Writer) *table {
	t := &table{w: w}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// row writes one line of cells.
func (t *table) row(cells ...any) {
	for i, c := range cells {
		if i > 0 {
			t.tw.Write([]byte{'\t'})
		}
		fmt.Fprint(t.tw, c)
	}
	t.tw.Write([]byte{'\n'})
}

// flush writes the aligned table to the underlying writer.
func (t *table) flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(t.buf.String()) {
		if _, err := io.WriteString(t.w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}
