package dev.redistb.gateway;

import dev.redistb.spring.Limiters;
import dev.redistb.spring.RedisTbAutoConfiguration;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.context.annotation.Bean;

/** The {@code redisTbRateLimiter} bean, when Spring Cloud Gateway (WebFlux) is there. */
@AutoConfiguration(
    after = RedisTbAutoConfiguration.class,
    beforeName = "org.springframework.cloud.gateway.config.GatewayAutoConfiguration")
@ConditionalOnClass(AbstractRateLimiter.class)
@ConditionalOnBean(Limiters.class)
public class RedisTbGatewayAutoConfiguration {
  @Bean
  @ConditionalOnMissingBean
  RedisTbRateLimiter redisTbRateLimiter(
      Limiters limiters, ConfigurationService configurationService) {
    return new RedisTbRateLimiter(limiters, configurationService);
  }
}
