package standin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log"
	"os"
	"sync"
)

// Recorder appends each value to file as one JSON line, and logs it under prefix when prefix is
// set: what a stand-in answered, for the tests to read back with Lines.
func Recorder[T any](file, prefix string) func(T) {
	if file == "" {
		return func(T) {}
	}
	var mu sync.Mutex
	return func(v T) {
		line, _ := json.Marshal(v)
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			log.Printf("%s: %v", prefix, err)
			return
		}
		defer f.Close()
		if _, err := f.Write(append(line, '\n')); err != nil {
			log.Printf("%s: %v", prefix, err)
		}
		if prefix != "" {
			log.Printf("%s: %s", prefix, line)
		}
	}
}

// Lines reads what a Recorder wrote; none yet is none.
func Lines[T any](file string) ([]T, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []T
	lines := bufio.NewScanner(bytes.NewReader(data))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		var v T
		if err := json.Unmarshal(lines.Bytes(), &v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, lines.Err()
}
