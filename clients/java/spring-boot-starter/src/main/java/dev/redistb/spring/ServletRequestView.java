package dev.redistb.spring;

import dev.redistb.RequestView;
import jakarta.servlet.http.HttpServletRequest;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;

/** A servlet request as the limiter sees it: the TCP peer, header lines as received, the route. */
record ServletRequestView(HttpServletRequest request, String route) implements RequestView {
  @Override
  public String peer() {
    return request.getRemoteAddr();
  }

  @Override
  public List<String> header(String name) {
    Enumeration<String> lines = request.getHeaders(name);
    return lines == null ? List.of() : Collections.list(lines);
  }
}
