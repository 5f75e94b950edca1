package dev.redistb.spring;

import dev.redistb.StartupException;
import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * SPEC U1-U4: a limiter that cannot start fails the application's start with its one line, not a
 * stack trace: Spring Boot reports this analysis (the line as its description) instead of logging
 * the exception. An application that must print only the line and exit with status 3, as the
 * examples do, uses {@link RedisTbStartup#run}.
 */
public final class StartupFailureAnalyzer extends AbstractFailureAnalyzer<StartupException> {
  @Override
  protected FailureAnalysis analyze(Throwable rootFailure, StartupException cause) {
    return new FailureAnalysis(cause.getMessage(), null, cause);
  }
}
