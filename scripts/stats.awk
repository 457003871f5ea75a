# stats(list): the median and range of the space-separated numbers in list, "median (min-max)",
# for the benchmark scripts' reports (awk -f scripts/stats.awk -f /dev/stdin FILE <<'AWK' ...).
function stats(list,   n, a, i, j, t, med) {
  n = split(list, a, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
  med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  return sprintf(fmt, med, a[1], a[n])
}
