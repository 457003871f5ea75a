package spec

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// FieldError is one refused value: the field's path in the stack config, what is wrong, and the
// fix. Line is the value's line in the stack file, when the spec came from one.
type FieldError struct {
	Field   string
	Problem string
	Fix     string
	Line    int
}

func (e *FieldError) Error() string {
	msg := fmt.Sprintf("%s.%s: %s; %s", ConfigKey, e.Field, e.Problem, e.Fix)
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s", e.Line, msg)
	}
	return msg
}

// Fields lists the field of every FieldError inside err, in order.
func Fields(err error) []string {
	var fields []string
	var walk func(error)
	walk = func(err error) {
		var fe *FieldError
		if errors.As(err, &fe) && fe == err {
			fields = append(fields, fe.Field)
			return
		}
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return fields
}

// validator collects every refused value of one Validate run.
type validator struct {
	errs  []error
	lines map[string]int
}

// fail refuses a field. The problem must quote any value from the stack (%q or Excerpt), so no
// newline or pasted secret reaches a terminal or a log unquoted.
func (v *validator) fail(field, fix, problem string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Problem: fmt.Sprintf(problem, args...), Fix: fix, Line: v.lineOf(field)})
}

// lineOf is the stack-file line of a field, or of the nearest enclosing field the stack set.
func (v *validator) lineOf(field string) int {
	for f := field; f != ""; {
		if line, ok := v.lines[f]; ok {
			return line
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// between refuses an integer outside [lo, hi].
func (v *validator) between(field string, value, lo, hi int64, why string) bool {
	if value < lo || value > hi {
		v.fail(field, fmt.Sprintf("use %d to %d: %s", lo, hi, why), "%d is out of range", value)
		return false
	}
	return true
}

// duration refuses a Go duration outside [lo, hi].
func (v *validator) duration(field, value string, lo, hi time.Duration) {
	d, err := time.ParseDuration(value)
	if err != nil || d < lo || d > hi {
		v.fail(field, fmt.Sprintf(`write a Go duration from %s to %s, such as "5m"`, lo, hi), "%s is not such a duration", Excerpt(value))
	}
}

// Validate checks a defaulted Cluster and returns every problem at once, each naming its field.
// Each rule checks a value against the grammar and limits of what consumes it: a kubelet flag, a
// systemd line, an Azure resource id or size, an SSH login. Sizes come first, bounded, so no rule
// after them computes with a count that overflows.
func (c *Cluster) Validate() error {
	v := &validator{lines: c.lines}
	countsOK := c.validateCounts(v)
	c.validateIdentity(v)
	c.validateVersions(v)
	c.validateEtcd(v, "etcdMain", c.EtcdMain)
	c.validateEtcd(v, "etcdEvents", c.EtcdEvents)
	c.validateAPIServer(v)
	c.validateBackup(v)
	c.validateKubelet(v)
	c.validateAutoscaler(v)
	c.validateJoins(v)
	c.validateTeams(v)
	c.validatePools(v, countsOK)
	if countsOK {
		c.validateNetwork(v)
		c.validateLimits(v)
		c.validateAzureNames(v)
	}
	return joinErrors(v.errs)
}

// maxErrors is how many errors are shown; a spec that breaks more is broken throughout.
const maxErrors = 50

func joinErrors(errs []error) error {
	if len(errs) > maxErrors {
		errs = append(errs[:maxErrors:maxErrors], fmt.Errorf("%s: %d more errors not shown", ConfigKey, len(errs)-maxErrors))
	}
	return errors.Join(errs...)
}
