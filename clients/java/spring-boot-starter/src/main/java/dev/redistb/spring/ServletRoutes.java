package dev.redistb.spring;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.springframework.context.ApplicationContext;
import org.springframework.core.annotation.AnnotationAwareOrderComparator;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.HandlerMapping;
import org.springframework.web.servlet.function.support.RouterFunctionMapping;
import org.springframework.web.servlet.mvc.method.RequestMappingInfoHandlerMapping;
import org.springframework.web.util.ServletRequestPathUtils;

/**
 * SPEC K5 in a servlet filter: the template of the route Spring MVC will run ({@code GET
 * /items/{id}}), found by asking the application's handler mappings (controllers and router
 * functions; static resources are no route) in their order, on a view of the request whose
 * attributes are its own, so the dispatch that follows is untouched. Raw paths never reach a key.
 */
final class ServletRoutes {
  private final ApplicationContext context;
  private volatile List<HandlerMapping> mappings;

  ServletRoutes(ApplicationContext context) {
    this.context = context;
  }

  private List<HandlerMapping> mappings() {
    List<HandlerMapping> m = mappings;
    if (m == null) {
      m = new ArrayList<>();
      for (HandlerMapping hm : context.getBeansOfType(HandlerMapping.class).values()) {
        if (hm instanceof RequestMappingInfoHandlerMapping || hm instanceof RouterFunctionMapping) {
          m.add(hm);
        }
      }
      AnnotationAwareOrderComparator.sort(m);
      mappings = m;
    }
    return m;
  }

  /** {@code "METHOD /template"}, or null when no route matches. */
  String route(HttpServletRequest request) {
    for (HandlerMapping hm : mappings()) {
      Probe probe = new Probe(request);
      try {
        ServletRequestPathUtils.parseAndCache(probe);
        HandlerExecutionChain chain = hm.getHandler(probe);
        if (chain == null) {
          continue;
        }
        Object pattern = probe.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
        if (pattern != null) {
          return request.getMethod() + " " + pattern;
        }
      } catch (Exception e) {
        // 405, 406, ...: this mapping has no route for the request
      }
    }
    return null;
  }

  /** The request with attributes of its own (reads fall through to the request's). */
  private static final class Probe extends HttpServletRequestWrapper {
    private final Map<String, Object> attributes = new HashMap<>();
    private final Set<String> removed = new HashSet<>();

    Probe(HttpServletRequest request) {
      super(request);
    }

    @Override
    public Object getAttribute(String name) {
      if (attributes.containsKey(name)) {
        return attributes.get(name);
      }
      return removed.contains(name) ? null : super.getAttribute(name);
    }

    @Override
    public void setAttribute(String name, Object o) {
      removed.remove(name);
      attributes.put(name, o);
    }

    @Override
    public void removeAttribute(String name) {
      attributes.remove(name);
      removed.add(name);
    }

    @Override
    public Enumeration<String> getAttributeNames() {
      Set<String> names = new HashSet<>(Collections.list(super.getAttributeNames()));
      names.removeAll(removed);
      names.addAll(attributes.keySet());
      return Collections.enumeration(names);
    }
  }
}
