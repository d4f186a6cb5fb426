// Command testfailures prints, from the output of `go test` (with or without -v), what each failed
// test logged: the lines under its "=== RUN", "=== CONT" and "=== NAME" headers, and those after its
// "--- FAIL" line (where go test prints them without -v). A suite whose cases run in parallel
// interleaves their output for half an hour; printed at the end of a failed run, this is what a
// reader needs first, whatever part of the output they are shown.
//
// Usage: go run ./hack/testfailures [-lines N] FILE
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	lines := flag.Int("lines", 40, "print at most this many of each failed test's last lines")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: testfailures [-lines N] FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "testfailures:", err)
		os.Exit(1)
	}
	failed, err := parse(f)
	_ = f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testfailures:", err)
		os.Exit(1)
	}
	write(os.Stdout, failed, *lines)
}

// failure is a failed test and what it logged, in order.
type failure struct {
	Name  string
	Lines []string
}

// parse reads `go test` output and returns the failed tests that have no failed subtest (a
// parent fails with its child; the child's lines say why), in the order their results were printed.
func parse(r io.Reader) ([]failure, error) {
	out := map[string][]string{}
	var failedOrder []string
	failed := map[string]bool{}
	current := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(line, "=== "):
			// "=== RUN   Name", "=== CONT  Name", "=== NAME  Name", "=== PAUSE Name"
			if f := strings.Fields(line); len(f) >= 3 && (f[1] == "RUN" || f[1] == "CONT" || f[1] == "NAME" || f[1] == "PAUSE") {
				current = f[2]
			} else {
				current = ""
			}
		case strings.HasPrefix(trimmed, "--- FAIL: "):
			name := strings.TrimPrefix(trimmed, "--- FAIL: ")
			if i := strings.LastIndex(name, " ("); i >= 0 {
				name = name[:i]
			}
			if !failed[name] {
				failed[name] = true
				failedOrder = append(failedOrder, name)
			}
			// Without -v, a failed test's lines follow its result line.
			current = name
		case strings.HasPrefix(trimmed, "--- PASS: ") || strings.HasPrefix(trimmed, "--- SKIP: "):
			current = ""
		case current != "" && strings.HasPrefix(line, "    "):
			out[current] = append(out[current], line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var res []failure
	for _, name := range failedOrder {
		leaf := true
		for other := range failed {
			if strings.HasPrefix(other, name+"/") {
				leaf = false
				break
			}
		}
		if leaf {
			res = append(res, failure{Name: name, Lines: out[name]})
		}
	}
	return res, nil
}

// write prints each failure's last n lines under its name.
func write(w io.Writer, failures []failure, n int) {
	if len(failures) == 0 {
		return
	}
	fmt.Fprintf(w, "\n=== what the %d failed test(s) logged (last %d lines each)\n", len(failures), n)
	for _, f := range failures {
		fmt.Fprintf(w, "--- %s\n", f.Name)
		lines := f.Lines
		if len(lines) > n {
			fmt.Fprintf(w, "    ... %d lines before\n", len(lines)-n)
			lines = lines[len(lines)-n:]
		}
		if len(lines) == 0 {
			fmt.Fprintln(w, "    (logged nothing)")
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}
}
