package main

import "example.com/violation/lib"

func main() { _ = lib.Uses }
