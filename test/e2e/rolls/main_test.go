package rolls_test

import (
	"os"
	"testing"

	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.Main(m, framework.Options{})) }
