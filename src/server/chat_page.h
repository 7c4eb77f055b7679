// The chat page `vlstack serve` answers at `/`: src/server/web/chat.html, embedded in the
// binary at build time by chat_page.cmake (docs/chat_page.md).
#ifndef VLSTACK_SERVER_CHAT_PAGE_H_
#define VLSTACK_SERVER_CHAT_PAGE_H_

#include <string_view>

namespace vls::server {

// The page's bytes (UTF-8 HTML with its CSS and JS inline; serve as
// `text/html; charset=utf-8`). Static storage: valid for the life of the process, safe to read
// from any thread.
std::string_view ChatPageHtml();

}  // namespace vls::server

#endif  // VLSTACK_SERVER_CHAT_PAGE_H_
