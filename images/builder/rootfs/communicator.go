package rootfs

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"

	"github.com/hashicorp/packer-plugin-sdk/chroot"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

// communicator is the SDK's chroot communicator with one change: commands run as
// `chroot ROOT /bin/sh -c CMD` directly. The SDK's passes CMD through a host shell in double
// quotes, which expands $(...) and $VAR on the host instead of inside the root.
type communicator struct{ chroot.Communicator }

func (c *communicator) Start(ctx context.Context, cmd *packersdk.RemoteCmd) error {
	local := exec.CommandContext(ctx, "chroot", c.Chroot, "/bin/sh", "-c", cmd.Command)
	local.Stdin, local.Stdout, local.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	if err := local.Start(); err != nil {
		return err
	}
	go func() {
		status := 0
		if err := local.Wait(); err != nil {
			status = 1
			var exit *exec.ExitError
			if errors.As(err, &exit) && exit.ExitCode() > 0 {
				status = exit.ExitCode()
			}
		}
		cmd.SetExited(status)
	}()
	return nil
}

// runStreaming runs a host command and passes each line of its output to the UI as it comes.
func runStreaming(ctx context.Context, ui packersdk.Ui, cmd *exec.Cmd) error {
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewScanner(r)
		for lines.Scan() {
			ui.Message(lines.Text())
		}
	}()
	err := cmd.Wait()
	w.Close()
	<-done
	return err
}
