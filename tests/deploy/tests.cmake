# Deployment files (issue 36): deploy/k8s built and validated against the Kubernetes schemas and
# cross-checked, haproxy -c, promtool, systemd-analyze verify; broken copies must be refused.
# Skips (77) without haproxy, promtool, systemd or the npm packages of tests/deploy/setup.sh.
add_test(NAME deploy_manifests
         COMMAND node ${CMAKE_CURRENT_LIST_DIR}/validate_manifests.mjs)
set_tests_properties(deploy_manifests PROPERTIES LABELS deploy TIMEOUT 120 SKIP_RETURN_CODE 77)
