package machine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The index script numbers local NVMe disks in PCI order, skipping remote (OS/data) disks and
// partitions, over a sysfs tree laid out as the kernel lays it out.
func TestAzureLocalDiskIndex(t *testing.T) {
	sys := t.TempDir()
	script := filepath.Join(t.TempDir(), "index")
	if err := os.WriteFile(script, []byte(azureLocalDiskIndexScript), 0o755); err != nil {
		t.Fatal(err)
	}
	// controller → PCI slot, model; namespaces under it
	for _, c := range []struct{ ctrl, pci, model string }{
		{"nvme0", "0000:00:04.0", "MSFT NVMe Accelerator v1.0              "},
		{"nvme2", "0000:00:06.0", "Microsoft NVMe Direct Disk v2           "},
		{"nvme1", "0000:00:05.0", "Microsoft NVMe Direct Disk              "},
	} {
		ctrl := filepath.Join(sys, "devices/pci0000:00", c.pci, "nvme", c.ctrl)
		ns := filepath.Join(ctrl, c.ctrl+"n1")
		mkdir(t, filepath.Join(ns, c.ctrl+"n1p1"))
		write(t, filepath.Join(ctrl, "model"), c.model)
		write(t, filepath.Join(ns, c.ctrl+"n1p1", "partition"), "1")
		symlink(t, "..", filepath.Join(ns, "device"))
		symlink(t, "..", filepath.Join(ns, c.ctrl+"n1p1", "device")) // never read: partitions are skipped
		symlink(t, ns, filepath.Join(sys, "class/block", c.ctrl+"n1"))
		symlink(t, filepath.Join(ns, c.ctrl+"n1p1"), filepath.Join(sys, "class/block", c.ctrl+"n1p1"))
	}
	for dev, want := range map[string]string{"nvme1n1": "1", "nvme2n1": "2", "nvme0n1": "", "nvme1n1p1": ""} {
		cmd := exec.Command("sh", script, dev)
		cmd.Env = append(os.Environ(), "SYSFS="+sys)
		out, err := cmd.Output()
		got := strings.TrimSpace(string(out))
		if want == "" {
			if err == nil {
				t.Errorf("%s: index %q, want an error (not a local disk)", dev, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: index %q (%v), want %s", dev, got, err, want)
		}
	}
}

// The udev rule names local NVMe disks by the script's output and the SCSI resource disk by its
// fabric id, the two names localDiskScript looks for.
func TestAzureDiskRulesGiveTheNamesTheDiskScriptReads(t *testing.T) {
	for _, name := range []string{"disk/azure/local/by-index/%c", "disk/azure/resource"} {
		if !strings.Contains(azureDiskRules, `SYMLINK+="`+name+`"`) {
			t.Errorf("rules do not create %s", name)
		}
	}
	for _, link := range []string{"/dev/disk/azure/local/by-index/1", "/dev/disk/azure/resource"} {
		if !strings.Contains(localDiskScript("l", "/d"), link) {
			t.Errorf("the local-disk script does not look for %s", link)
		}
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	mkdir(t, filepath.Dir(path))
	if err := os.WriteFile(path, []byte(content+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	mkdir(t, filepath.Dir(link))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
