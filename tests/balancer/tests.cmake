# Replicas behind a load balancer (issue 36; docs/deploy.md, ADR 0024).
# The conversation key HAProxy routes on, in plain Lua (HAProxy embeds Lua 5.3).
add_test(NAME balancer_conversation_key
         COMMAND lua5.3 ${CMAKE_CURRENT_LIST_DIR}/conversation_key_test.lua
                 ${CMAKE_SOURCE_DIR}/deploy/haproxy/conversation_key.lua)
# Three replicas behind HAProxy on loopback: affinity against round robin, the balancer's
# overhead, failover after SIGKILL, a rolling restart under load. Alone (RUN_SERIAL): it
# measures latencies and load-dependent routing on a 2-core machine.
add_test(NAME balancer_replicas
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/balancer_test.py
                 --vlstack $<TARGET_FILE:vlstack>)
set_tests_properties(balancer_conversation_key balancer_replicas
                     PROPERTIES LABELS balancer TIMEOUT 600 SKIP_RETURN_CODE 77)
set_tests_properties(balancer_replicas PROPERTIES RUN_SERIAL TRUE)
