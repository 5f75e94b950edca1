package dev.redistb.gateway;

import dev.redistb.spring.Limiters;
import dev.redistb.spring.RedisTbAutoConfiguration;
import org.springframework.beans.factory.config.BeanDefinition;
import org.springframework.beans.factory.config.BeanFactoryPostProcessor;
import org.springframework.beans.factory.config.ConfigurableListableBeanFactory;
import org.springframework.boot.autoconfigure.AutoConfiguration;
import org.springframework.boot.autoconfigure.condition.ConditionalOnBean;
import org.springframework.boot.autoconfigure.condition.ConditionalOnClass;
import org.springframework.boot.autoconfigure.condition.ConditionalOnMissingBean;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.filter.ratelimit.RateLimiter;
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

  /**
   * Switching a route is one line even where spring-data-redis (reactive) is on the classpath: the
   * gateway's own {@code redisRateLimiter} bean is then there too, and its RequestRateLimiter
   * filter factory takes a single default RateLimiter. The default stays {@code redisRateLimiter}
   * (routes that name no rate-limiter keep it), unless the application made a RateLimiter primary
   * itself.
   */
  @Bean
  static BeanFactoryPostProcessor redisTbKeepsTheDefaultRateLimiter() {
    return factory -> keepDefault(factory);
  }

  static void keepDefault(ConfigurableListableBeanFactory factory) {
    String[] limiters = factory.getBeanNamesForType(RateLimiter.class, true, false);
    if (limiters.length < 2 || !factory.containsBeanDefinition("redisRateLimiter")) {
      return;
    }
    for (String name : limiters) {
      if (factory.containsBeanDefinition(name) && factory.getBeanDefinition(name).isPrimary()) {
        return;
      }
    }
    BeanDefinition redis = factory.getBeanDefinition("redisRateLimiter");
    redis.setPrimary(true);
  }
}
