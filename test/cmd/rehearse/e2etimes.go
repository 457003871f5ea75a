package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/clusterforge/clusterforge/test/docblock"
	"github.com/clusterforge/clusterforge/test/e2etimes"
	"github.com/clusterforge/clusterforge/test/scale"
)

// e2eTimes writes where `make e2e`'s time went: build/e2e-times.json and .md from its log, and
// with --docs the table of docs/testing.md.
func e2eTimes(args []string) error {
	fs := flag.NewFlagSet("e2e-times", flag.ContinueOnError)
	logFile := fs.String("log", "build/e2e.log", "the `go test -v` log of make e2e")
	out := fs.String("out", "build/e2e-times", "writes <out>.json and <out>.md")
	docs := fs.String("docs", "", "also rewrite this page's e2e-times block (docs/testing.md)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(*logFile)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	packages, err := e2etimes.Parse(f)
	if err != nil {
		return err
	}
	if len(packages) == 0 {
		return fmt.Errorf("%s holds no test results", *logFile)
	}
	run := e2etimes.Run{Finished: info.ModTime(), Machine: scale.ThisMachine(".").String(), Packages: packages}
	data, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	module := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		module = bi.Main.Path
	}
	table := e2etimes.Table(run, module)
	if err := os.WriteFile(*out+".json", append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(*out+".md", []byte(table), 0o644); err != nil {
		return err
	}
	fmt.Print(table)
	if *docs == "" {
		return nil
	}
	before, _, after, err := docblock.Read(*docs, "e2e-times")
	if err != nil {
		return err
	}
	return os.WriteFile(*docs, []byte(before+"\n"+table+after), 0o644)
}
